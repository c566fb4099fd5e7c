"""The code detector (#34) on real files of the installed packages: the shipped model's precision and recall on the
held-out half, the fit deterministic and as good on this machine's files, Chinese/Japanese/Korean prose ruled out."""

import numpy as np
import pytest

from gpupipe.stages.filters.code_detect import MODEL, code_probability, features, fit, not_code, probability, \
    text_counts
from tests.helpers.installed_text import cjk_paragraphs, installed_samples


def precision_recall(p, y):
    called = p >= 0.5
    tp = int((called & (y == 1)).sum())
    return tp / max(int(called.sum()), 1), tp / int((y == 1).sum())


@pytest.fixture(scope="module")
def data():
    samples = installed_samples()
    y = np.array([s.label for s in samples])
    held = np.array([s.held_out for s in samples])
    counts = text_counts([s.text for s in samples])
    assert (y[held] == 1).sum() >= 100 and (y[held] == 0).sum() >= 100
    return samples, y, held, counts


def test_shipped_model_on_held_out_installed_files(data):
    samples, y, held, counts = data
    p = code_probability([s.text for s in samples])
    np.testing.assert_array_equal(p, np.where(not_code(counts), 0.0, probability(features(counts), MODEL)))
    precision, recall = precision_recall(p[held], y[held])
    assert precision >= 0.95 and recall >= 0.95, (precision, recall)


def test_fit_is_deterministic_and_generalises(data):
    """Fitted on this machine's training half, the model reaches the same bar on its held-out half."""
    _, y, held, counts = data
    x, ok = features(counts), ~not_code(counts)
    model = fit(x[~held & ok], y[~held & ok])
    assert model == fit(x[~held & ok], y[~held & ok])
    assert model["features"] == MODEL["features"] and len(model["weights"]) == len(MODEL["weights"])
    p = np.where(ok, probability(x, model), 0.0)
    precision, recall = precision_recall(p[held], y[held])
    assert precision >= 0.95 and recall >= 0.95, (precision, recall)


def test_cjk_prose_is_not_code():
    texts = cjk_paragraphs("zh") + cjk_paragraphs("other")
    if not texts:
        pytest.skip("this Python ships without Lib/test/cjkencodings")
    ruled_out = not_code(text_counts(texts))
    assert ruled_out.mean() >= 0.9 and (code_probability(texts) < 0.5).all()   # one mixes in English words


def test_empty_and_blank_texts():
    assert code_probability(["", "   \n\n  "]).tolist() == [0.0, 0.0]
    assert code_probability([]).shape == (0,)
