"""Language identification with fastText's lid.176 model (shipped as gpupipe/data/lid.176.ftz), corrected by the
text's script.

Adds `lang` (ISO code), `lang_score`, `lang_raw` (fastText's own label), `lang_rule` (the rule that changed it, ""
where none did) and `lang_script` (Hans / Hant / Hani for a document in a Han language, "" else), then keeps
documents whose language is in `keep` and whose score reaches `min_score` (one threshold, one per language with
`default` for the rest: the user's spec gives zh 0.65, en 0.80, other 0.85; or `fineweb2`, below).

Corrections after fastText, in order (docs/design.md, "Language ID: what the script says"):
- `casefold`: a text fastText is unsure of (score under `casefold_below`, 0.5: below even odds) is predicted again
  lowercased and the more confident label kept; lid.176 is case-sensitive and ALL-CAPS headlines and tables are
  not what it learnt from (newswire earnings tables come out `es`).
- script rules (gpupipe/stages/filters/lang_script.py): where CJK characters are at least half of the letters, Hangul means
  `ko` (`hangul`), kana means `ja` (`kana`), Han without kana means `zh` (`no_kana` from ja, `no_hangul` from ko,
  `han` from a language not written in Han, e.g. en for Chinese with a few English words); fastText's label stands
  where the script agrees. A corrected label's score is the CJK share of the letters.
- `merge`: labels filed under another, by default `{zh: [wuu, yue]}`: the target mixture has one zh share, and on
  web text lid.176's wuu and yue are mostly Mandarin it is unsure of (of the benchmark corpus's 99,582 Mandarin
  documents, 486 come out wuu and 135 yue); `merge: {}` keeps them apart.

Code (seed 002 mixes `code` as a language, min confidence 0.50): with `detect_code` on (by default when `code` is
named in `keep` or `min_score`), a document the code detector (code_detect.py: line, symbol and token features, a
logistic model shipped as constants) gives P(code) >= 0.5 gets lang `code`, score P(code), rule `code`; lang_raw
stays fastText's label. `min_score` also takes seed 002's `other` for `default`, and `code` (0.50 when not given).

Two levels:
- `document`: one prediction per document, on the whole text when it fits in `max_chars`, else on its head, middle
  and tail (a third each), so that a long document is not filed under the language of its first lines.
- `paragraph`: one prediction per paragraph (line), each corrected as a document is; the document's language is the
  one with the most characters among confidently identified paragraphs, its score their character-weighted mean
  confidence, and `lang_mix` (a JSON object string, e.g. {"en":0.83,"zh":0.17}) gives every language's share of
  those characters; `lang_raw` is the same vote over fastText's own labels.

Short documents (fastText's confidence is low on short text, under ~50 words) are not predicted: under `min_chars`
characters a text in a CJK script gets its script's language (`short_script`: Chinese reviews of a few characters
are Chinese), any other gets lang `und`, score 0 and the reason `lang_too_short` (or passes, with `keep_short`).
Measured on real English and Chinese text (lid.176.ftz, random chunks): at 20 characters 4% of English and 11% of
Chinese chunks are misidentified, at 30 characters 2.5% and 6%, at 50 characters 1% and 3%; 30 is the default
floor, for documents and for voting paragraphs alike. `min_score_by_length: {N: s}` asks at most score s of
documents under N characters (off by default: short CJK texts are judged by their script already, and a lower bar
for short Latin-script text admits misidentified text; a mixture that wants short reviews sets it).

`min_score: fineweb2`: FineWeb2's per-language thresholds, max(0.3, min(0.9, median - std)) of each language's
scores in this run. Stats, then decide: the stage runs as phases (LangIdTwoPass) and the thresholds go into its
stats (extra `min_score_<lang>`) and so into the report.

Every prediction of a partition is one call of gpupipe.kernels.fasttext_model (plus one for the case-folded
retries), a numba reimplementation of fastText's supervised predict over the Arrow buffers, parallel over documents
and without the GIL (fastText's binding holds it, so language ID ran on one core); it gives fastText's labels and
probabilities bit for bit (see tests/test_fasttext_kernel.py). The head/middle/tail sample and the
newline-to-space folding are done in the kernel too, the script counts are one more kernel pass
(kernels/script_share.py), and the rules are numpy over label indices, so no Python loop runs per document; the
per-paragraph aggregation is a pandas groupby.
"""

from __future__ import annotations

import functools
import os
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field, field_validator, model_validator

from gpupipe.config_base import FileRef, Fraction, KeyProblem, Strict, did_you_mean
from gpupipe.stages.base import Applied, MapStage, RunContext
from gpupipe.stages.filters.lang_script import (CASEFOLD, CODE_RULE, HAN_LANGS, MERGE, NO_RULE, OTHER_SCRIPT, RULES,
                                        SCRIPT_LANGS,
                                        SHORT_SCRIPT, VARIANTS, count_scripts, han_variant_codes, label_families,
                                        script_language, script_rules, script_table)
from gpupipe.stages.phases import APPLY, DRIVER, Phase, PhasedStage, PhaseRun, Task

LABEL_PREFIX = "__label__"
UNDETERMINED = "und"   # ISO 639-2 for "undetermined": documents too short to identify
CODE = "code"          # the language of a document the code detector calls source code (code_detect.py)
CODE_AT = 0.5          # a document is code when the detector's P(code) reaches this (even odds)
CODE_MIN_SCORE = 0.50  # the threshold of `code` when min_score names none (seed 002's min_confidence for code)


def default_model_path() -> str:
    """lid.176.ftz as gpupipe ships it (package data, gpupipe/data: CC BY-SA 3.0, see the NOTICE beside it)."""
    from gpupipe import data

    return data.path(data.LID_176_FILE)


class LangIdConfig(Strict):
    keep: list[str] | None = None                  # None keeps every language
    # one threshold, or one per language (e.g. {zh: 0.65, en: 0.80, default: 0.85}), or `fineweb2`: per language,
    # max(0.3, min(0.9, median - std)) of that language's scores in this run (a first pass over every partition)
    # The default is seed 002's LANG_THRESHOLDS (zh 0.65, en 0.80, other 0.85; its `code` row is no fastText label).
    min_score: Fraction | dict[str, Fraction] | Literal["fineweb2"] = Field(
        default_factory=lambda: {"zh": 0.65, "en": 0.80, "default": 0.85})
    # {N: s}: documents under N characters need at most score s (the smallest N above the length applies), so
    # that short texts, whose confidence is low, are judged more leniently. Off by default.
    min_score_by_length: dict[int, Fraction] | None = None
    model: FileRef | None = None                   # a supervised fastText model; default lid.176.ftz (gpupipe/data)
    max_chars: int = Field(10_000, ge=3)           # characters predicted per document (per paragraph at that level)
    # a document longer than max_chars is read by its head, middle and tail ("spread"), or by its head alone ("head":
    # seed 002's `text[:500]` with max_chars: 500)
    sample: Literal["spread", "head"] = "spread"
    level: Literal["document", "paragraph"] = "document"
    min_chars: int = Field(30, ge=0)               # shorter documents are not predicted (0 = only empty ones)
    keep_short: bool = False                       # keep `und` documents rather than drop them as lang_too_short
    paragraph_min_chars: int = Field(30, ge=1)     # paragraph level: shorter paragraphs do not vote
    paragraph_min_score: Fraction = 0.5            # paragraph level: only paragraphs this confident vote
    script_rules: bool = True                      # correct fastText's label by the text's script (lang_script.py)
    casefold_below: Fraction = 0.5                 # predict again on lowercased text under this confidence (0: off)
    merge: dict[str, list[str]] = Field(default_factory=lambda: {"zh": ["wuu", "yue"]})  # labels filed under another
    # documents the code detector (code_detect.py) calls source code get lang `code` (lang_raw stays fastText's),
    # score P(code). null: on when `code` is in `keep` or a key of `min_score`; true / false: on / off.
    detect_code: bool | None = None

    @field_validator("min_score", mode="before")
    @classmethod
    def _other_is_default(cls, v: Any) -> Any:
        """`other` (seed 002's key for every other language) is a synonym of `default`."""
        if isinstance(v, dict) and "other" in v:
            if "default" in v:
                raise ValueError("give `other` or `default` (the same threshold: every language not named), not both")
            v = {("default" if k == "other" else k): x for k, x in v.items()}
        return v

    def code_on(self) -> bool:
        """Whether the code detector runs (see detect_code)."""
        if self.detect_code is not None:
            return self.detect_code
        named = (self.keep or []) + (list(self.min_score) if isinstance(self.min_score, dict) else [])
        return CODE in named

    @model_validator(mode="after")
    def _known_languages(self) -> "LangIdConfig":
        """`keep`, `merge` and the per-language `min_score` keys must be languages the model predicts (or merge
        targets): a misspelt code would silently drop, or fail to merge, every document of that language."""
        if self.keep == []:
            raise KeyProblem("keep", "an empty list keeps no document; leave `keep` out (null) to keep every language")
        if self.min_score_by_length is not None and any(n < 1 for n in self.min_score_by_length):
            raise KeyProblem("min_score_by_length", "lengths must be at least 1 character, e.g. {30: 0.4, 100: 0.55}")
        if self.detect_code is False and CODE in (self.keep or []) + (
                list(self.min_score) if isinstance(self.min_score, dict) else []):
            raise KeyProblem("detect_code", "`code` is named in keep or min_score but detect_code is false: no "
                                            "document would be `code` (set detect_code: true, or leave it out)")
        sources = [c for codes in self.merge.values() for c in codes]
        if len(set(sources)) != len(sources) or set(sources) & set(self.merge):
            raise KeyProblem("merge", f"each language may be merged into one other only, and not be a target: "
                                      f"{self.merge}")
        user_merge = self.merge != LangIdConfig.model_fields["merge"].default_factory()
        # the default thresholds name zh and en: a model of other languages simply never meets those keys
        user_scores = self.min_score if isinstance(self.min_score, dict) and "min_score" in self.model_fields_set \
            else {}
        codes = (self.keep or []) + list(user_scores) + (sources if user_merge else [])
        if not codes:
            return self
        model = self.model or default_model_path()
        try:
            known = model_languages(model) | {UNDETERMINED}
        except ValueError as e:
            raise KeyProblem("model", f"not a fastText model: {model} ({e})") from None
        targets = known | set(self.merge) | {CODE}
        for key, values, allowed in (("keep", self.keep or [], targets),
                                     ("min_score", user_scores, targets | {"default"}),
                                     ("merge", sources if user_merge else [], known)):
            unknown = [c for c in values if c not in allowed]
            if unknown:
                listed = ", ".join(f"'{c}'" + did_you_mean(c, allowed, n=3, cutoff=0.5) for c in unknown)
                raise KeyProblem(key, f"language code(s) the model {os.path.basename(model)} does not know: {listed}")
        return self


def model_languages(path: str) -> frozenset[str]:
    """The language codes a fastText LID model predicts (its labels without __label__); cached per file version.
    Reading lid.176.ftz's labels (0.9 MB file) takes about 15 ms."""
    st = os.stat(path)
    return _model_labels(path, st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=8)
def _model_labels(path: str, mtime_ns: int, size: int) -> frozenset[str]:
    # imports numba, only when a config names languages
    from gpupipe.kernels.fasttext_model import read_labels

    return frozenset(label.removeprefix(LABEL_PREFIX) for label in read_labels(path))


def spread_sample(text: str, max_chars: int) -> str:
    """The text if it fits in max_chars, else its head, middle and tail, a third of max_chars each."""
    if len(text) <= max_chars:
        return text
    k = max_chars // 3
    mid = (len(text) - k) // 2
    return " ".join((text[:k], text[mid:mid + k], text[-k:]))


def aggregate_paragraphs(doc: np.ndarray, lang: np.ndarray, score: np.ndarray, chars: np.ndarray,
                         min_score: float, rules: np.ndarray | None = None) -> pd.DataFrame:
    """Per document (index: doc): `lang` with the most characters among confident paragraphs (among all of them
    when none is confident), `lang_score` its character-weighted mean confidence, `lang_mix` the shares as JSON;
    with `rules` (each paragraph's lang_rule), `lang_rule`: the rule that changed most of the characters of the
    winning language's paragraphs ("" when none did)."""
    p = pd.DataFrame({"doc": doc, "lang": lang, "chars": chars.astype(np.float64), "score": score})
    if rules is not None:
        p["rule"] = rules
    confident = p["score"] >= min_score
    p = p[confident | ~confident.groupby(p["doc"]).transform("any")]
    p = p.assign(wscore=p["score"] * p["chars"])
    g = p.groupby(["doc", "lang"], as_index=False)[["chars", "wscore"]].sum()
    g["share"] = g["chars"] / g.groupby("doc")["chars"].transform("sum")
    g = g.sort_values(["doc", "chars", "lang"], ascending=[True, False, True], kind="stable")
    mix = ('"' + g["lang"] + '":' + g["share"].round(3).astype(str)).groupby(g["doc"]).agg(",".join)
    best = g.drop_duplicates("doc").set_index("doc")
    out = pd.DataFrame({"lang": best["lang"], "lang_score": best["wscore"] / best["chars"],
                        "lang_mix": "{" + mix + "}"})
    if rules is not None:
        changed = p[(p["rule"] != "") & (p["lang"].to_numpy() == best["lang"].reindex(p["doc"]).to_numpy())]
        by_rule = changed.groupby(["doc", "rule"], as_index=False)["chars"].sum()
        by_rule = by_rule.sort_values(["doc", "chars", "rule"], ascending=[True, False, True], kind="stable")
        out["lang_rule"] = by_rule.drop_duplicates("doc").set_index("doc")["rule"].reindex(out.index).fillna("")
    return out


class LangId(MapStage):
    name = "langid"
    Config = LangIdConfig

    @classmethod
    def outputs(cls) -> tuple[str, ...]:
        return ("lang_raw", "lang", "lang_score")

    def __new__(cls, config: LangIdConfig, ctx: RunContext):
        # `min_score: fineweb2` needs a first pass over the whole run: the same stage, run as phases (it is then
        # not fused with its neighbours: the engine fuses map stations only).
        if cls is LangId and config.min_score == FINEWEB2:
            cls = LangIdTwoPass
        return super().__new__(cls)

    def setup(self) -> None:
        from gpupipe.kernels.fasttext_model import FastTextModel

        self._model = FastTextModel(self.config.model or default_model_path())
        if self.config.script_rules:
            script_table()   # built once per process (about 0.1 s), not inside the first partition

    def _names(self) -> list[str]:
        """The label names a decision indexes: the model's labels, `und`, then the script languages and merge
        targets the model does not predict itself."""
        names = [label.removeprefix(LABEL_PREFIX) for label in self._model.get_labels()] + [UNDETERMINED]
        return names + [x for x in dict.fromkeys(["zh", "ja", "ko", *self.config.merge]) if x not in names]

    def _predict(self, texts: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
        """Top label (index into _names()) and its probability for each text, in one kernel call: fastText's
        predict on spread_sample(text, max_chars).replace("\\n", " ")."""
        from gpupipe.kernels.strings import arrow_buffers

        if self.config.sample == "head":   # the kernel's spread sample leaves a text within max_chars as it is
            texts = pc.utf8_slice_codeunits(texts, 0, self.config.max_chars)
        ids, probs = self._model.predict_buffers(*arrow_buffers(texts), max_chars=self.config.max_chars,
                                                 newline_is_space=True)
        # fastText predicts nothing only for a line without any input row (impossible with </s> in the
        # vocabulary, as in lid.176): such a text is `und` with score 0.
        return np.where(ids < 0, len(self._model.get_labels()), ids), probs.astype(np.float64)

    def _decide(self, texts: pa.Array, predicted: np.ndarray) -> dict[str, np.ndarray]:
        """fastText's label of each text where `predicted` (else `und`), then the corrections, in order: case
        folding (predict again on the lowercased text when unsure; lid.176 is case-sensitive and ALL-CAPS
        headlines and tables are not what it learnt from), the script rules (lang_script.py; texts not predicted
        get their script's language, when it has one), the merge. Labels are indices into _names() until the
        end. Returns lang_raw, raw_score, lang, score, rule (names) and the script counts."""
        cfg, names = self.config, self._names()
        index = {x: i for i, x in enumerate(names)}
        n = len(texts)
        raw = np.full(n, index[UNDETERMINED], dtype=np.int64)
        score = np.zeros(n, dtype=np.float64)
        todo = np.flatnonzero(predicted)
        if len(todo):
            raw[todo], score[todo] = self._predict(texts.take(todo))
        lang, rule, raw_score = raw.copy(), np.zeros(n, dtype=np.int8), score.copy()
        unsure = todo[score[todo] < cfg.casefold_below]
        if len(unsure):
            folded, fscore = self._predict(pc.utf8_lower(texts.take(unsure)))
            better = fscore > score[unsure]
            at = unsure[better]
            rule[at[folded[better] != lang[at]]] = CASEFOLD     # a rule only where the label changed
            lang[at], score[at] = folded[better], fscore[better]
        counts = None
        if cfg.script_rules:
            counts = count_scripts(texts)
            script, share = script_language(counts)
            target = np.array([index.get(x, index[UNDETERMINED]) for x in SCRIPT_LANGS])[script]
            why = script_rules(label_families(names)[lang], script)
            why[~predicted] = np.where(script[~predicted] != OTHER_SCRIPT, SHORT_SCRIPT, NO_RULE)
            at = why != NO_RULE
            lang[at], score[at], rule[at] = target[at], share[at], why[at]
        merge_to = np.arange(len(names))
        for into, sources in cfg.merge.items():
            merge_to[[index[x] for x in sources if x in index]] = index[into]
        merged = merge_to[lang] != lang
        lang = merge_to[lang]
        rule[merged & (rule == NO_RULE)] = MERGE
        label = np.array(names, dtype=object)
        variant = np.zeros(n, dtype=np.int8)
        if counts is not None:
            han = np.isin(lang, [i for i, x in enumerate(names) if x in HAN_LANGS])
            variant[han] = han_variant_codes(counts[han])
        return {"lang_raw": label[raw], "raw_score": raw_score, "lang": label[lang], "score": score,
                "rule": pd.Categorical.from_codes(rule, RULES),             # few values: a code a row
                "variant": pd.Categorical.from_codes(variant, VARIANTS), "counts": counts}

    def transform(self, df: pd.DataFrame) -> pd.DataFrame:
        arr = pa.array(df["text"], type=pa.large_string(), from_pandas=True).fill_null("")
        chars = pc.utf8_length(pc.utf8_trim_whitespace(arr)).to_numpy(zero_copy_only=False)
        short = chars < max(self.config.min_chars, 1)
        if self.config.level == "paragraph":
            cols = self._paragraph_level(arr, chars, short)
        else:
            d = self._decide(arr, ~short)
            cols = {"lang_raw": d["lang_raw"], "lang": d["lang"], "lang_score": np.round(d["score"], 4),
                    "lang_rule": d["rule"], "lang_script": d["variant"]}
        if self.config.code_on():
            cols = mark_code(arr, ~short, cols)
        return df.assign(**cols)

    def _paragraph_level(self, arr: pa.Array, chars: np.ndarray, short: np.ndarray) -> dict[str, np.ndarray]:
        """The langid columns at paragraph level: every paragraph decided as a document is (`_decide`), then the
        votes aggregated per document, for the raw labels and for the corrected ones. Short documents get their
        script's language, as at document level."""
        cfg, n = self.config, len(arr)
        lines = pc.split_pattern(arr, "\n")
        parent = pc.list_parent_indices(lines).to_numpy()
        para = pc.utf8_trim_whitespace(pc.list_flatten(lines))
        para_chars = pc.utf8_length(para).to_numpy(zero_copy_only=False)
        votes = (para_chars >= cfg.paragraph_min_chars) & ~short[parent]
        # A document of short lines only (a list, a poem) is predicted whole, as one paragraph.
        whole = np.flatnonzero(~short & (np.bincount(parent[votes], minlength=n) == 0))
        # Paragraphs are cut to max_chars (their head), so the kernel's spread sample leaves them as they are;
        # the short documents go last, to be decided by their script only.
        heads = pc.utf8_slice_codeunits(para.filter(votes), 0, cfg.max_chars)
        at_short = np.flatnonzero(short)
        parts = [x.cast(pa.large_string()) for x in (heads, arr.take(whole), arr.take(at_short))]
        texts = pa.chunked_array([c for x in parts for c in (x.chunks if isinstance(x, pa.ChunkedArray) else [x])],
                                 type=pa.large_string()).combine_chunks()
        voting = len(texts) - len(at_short)
        d = self._decide(texts, np.arange(len(texts)) < voting)
        doc = np.concatenate([parent[votes], whole])
        weight = np.concatenate([para_chars[votes], chars[whole]])
        out = {"lang_raw": np.full(n, UNDETERMINED, dtype=object), "lang": np.full(n, UNDETERMINED, dtype=object),
               "lang_score": np.zeros(n), "lang_rule": np.full(n, "", dtype=object),
               "lang_mix": np.full(n, "{}", dtype=object)}
        if voting:
            raw = aggregate_paragraphs(doc, d["lang_raw"][:voting], d["raw_score"][:voting], weight,
                                       cfg.paragraph_min_score)
            agg = aggregate_paragraphs(doc, d["lang"][:voting], d["score"][:voting], weight,
                                       cfg.paragraph_min_score, rules=np.asarray(d["rule"][:voting], dtype=object))
            at = agg.index.to_numpy()
            out["lang_raw"][raw.index.to_numpy()] = raw["lang"].to_numpy()
            for col in ("lang", "lang_score", "lang_rule", "lang_mix"):
                out[col][at] = agg[col].to_numpy()
        out["lang"][at_short] = d["lang"][voting:]
        out["lang_score"][at_short] = d["score"][voting:]
        out["lang_rule"][at_short] = np.asarray(d["rule"][voting:], dtype=object)
        out["lang_score"] = np.round(out["lang_score"].astype(np.float64), 4)
        out["lang_rule"][out["lang"] == out["lang_raw"]] = ""   # a corrected paragraph that changed nothing
        variant = np.zeros(n, dtype=np.int8)
        if cfg.script_rules:
            han = pd.Series(out["lang"]).isin(HAN_LANGS).to_numpy()
            variant[han] = han_variant_codes(count_scripts(arr.filter(han)))
        out["lang_script"] = pd.Categorical.from_codes(variant, VARIANTS)
        out["lang_rule"] = pd.Categorical(out["lang_rule"], categories=RULES)
        return out

    def thresholds(self, df: pd.DataFrame, per_language: dict[str, float] | None = None) -> np.ndarray:
        """Each document's score threshold: its language's (`min_score`, or `per_language` as the first pass
        chose them for `fineweb2`), capped by `min_score_by_length` for its length."""
        t = per_language if per_language is not None else self.config.min_score
        if t == FINEWEB2:
            raise RuntimeError("langid: min_score fineweb2 thresholds come from the first pass (LangIdTwoPass.execute)")
        if isinstance(t, float | int):
            out = np.full(len(df), float(t))
        else:
            if self.config.code_on() and CODE not in t:
                t = {**t, CODE: CODE_MIN_SCORE}
            out = df["lang"].map(t).fillna(t.get("default", 0.0)).to_numpy(dtype=np.float64)
        caps = self.config.min_score_by_length
        if caps:
            arr = pa.array(df["text"], type=pa.large_string(), from_pandas=True).fill_null("")
            chars = pc.utf8_length(pc.utf8_trim_whitespace(arr)).to_numpy(zero_copy_only=False)
            bounds = np.array(sorted(caps), dtype=np.int64)
            cap = np.append(np.array([caps[b] for b in bounds], dtype=np.float64), np.inf)
            out = np.minimum(out, cap[np.searchsorted(bounds, chars, side="right")])
        return out

    def reasons(self, df: pd.DataFrame, per_language: dict[str, float] | None = None) -> pd.Series:
        why = np.full(len(df), None, dtype=object)   # later rules override earlier ones
        why[df["lang_score"].to_numpy() < self.thresholds(df, per_language)] = "lang_low_score"
        if self.config.keep is not None:
            why[~df["lang"].isin(self.config.keep).to_numpy()] = "lang_not_kept"
        why[(df["lang"] == UNDETERMINED).to_numpy()] = None if self.config.keep_short else "lang_too_short"
        return pd.Series(why, index=df.index, dtype=object)

    def apply_partition(self, df: pd.DataFrame, info: Any = None) -> Applied:
        df = self.transform(df)
        return Applied(df, self.reasons(df), rule_counts(df))

    def extra_stats(self, df_out: pd.DataFrame) -> Counter:
        return Counter({f"kept_lang_{k}": int(v) for k, v in df_out["lang"].value_counts().items()})


def mark_code(texts: pa.Array, judged: np.ndarray, cols: dict) -> dict:
    """The langid columns with every `judged` document the code detector calls code (P(code) >= CODE_AT) filed
    under `code`: lang `code`, lang_score its P(code), lang_rule `code`, no lang_script; lang_raw stays
    fastText's label. Judged at document level whatever the stage's level (a line of code alone is no document)."""
    from gpupipe.stages.filters.code_detect import code_probability

    p = np.zeros(len(texts))
    at = np.flatnonzero(judged)
    if len(at):
        p[at] = code_probability(texts.take(at))
    code = p >= CODE_AT
    if not code.any():
        return cols
    out = dict(cols)
    out["lang"] = np.where(code, CODE, np.asarray(cols["lang"], dtype=object)).astype(object)
    out["lang_score"] = np.where(code, np.round(p, 4), np.asarray(cols["lang_score"], dtype=np.float64))
    rule = np.asarray(pd.Categorical(cols["lang_rule"], categories=RULES).codes).copy()
    rule[code] = CODE_RULE
    out["lang_rule"] = pd.Categorical.from_codes(rule, RULES)
    variant = np.asarray(cols["lang_script"].codes).copy()
    variant[code] = 0
    out["lang_script"] = pd.Categorical.from_codes(variant, VARIANTS)
    return out


def rule_counts(df: pd.DataFrame) -> Counter:
    """Documents whose label a rule changed, per rule (`lang_rule_<rule>`), over every document of the partition."""
    rules = df["lang_rule"].value_counts()
    return Counter({f"lang_rule_{k}": int(v) for k, v in rules.items() if k and v})


# ---------------------------------------------------------------------------------------------------------------
# min_score: fineweb2 (FineWeb2's per-language thresholds): stats, then decide
# ---------------------------------------------------------------------------------------------------------------

FINEWEB2 = "fineweb2"
COLUMNS = "langid"     # the exchange that keeps each partition's langid columns from the first pass to the apply


def fineweb2_threshold(scores: np.ndarray, counts: np.ndarray) -> float:
    """max(0.3, min(0.9, median - std)) of a language's scores (`scores` with their multiplicities `counts`):
    FineWeb2's per-language confidence threshold (as np.median and np.std of the scores one by one)."""
    order = np.argsort(scores)
    v, c = scores[order], counts[order].astype(np.int64)
    total = int(c.sum())
    at = np.searchsorted(np.cumsum(c), [(total - 1) // 2 + 1, total // 2 + 1])   # the middle one or two
    median = float(v[at].mean())
    mean = float((v * c).sum() / total)
    std = float(np.sqrt(max((c * (v - mean) ** 2).sum() / total, 0.0)))
    return round(max(0.3, min(0.9, median - std)), 4)


@dataclass(slots=True)
class TwoPassState:
    thresholds: dict = field(default_factory=dict)   # language → min_score, from `decide`


class LangIdTwoPass(PhasedStage, LangId):
    """`langid` with `min_score: fineweb2`. Phases: `score` (per partition: the langid columns, kept in the
    exchange, and each language's score histogram returned), `decide` (driver: the thresholds, into run.state and
    the stage's stats as extra `min_score_<lang>`), `apply` (per partition: the first pass's columns and the
    thresholds, through the shared partition runner: rejects, reasons and stats as for any map stage)."""

    State = TwoPassState

    def phases(self) -> list[Phase]:
        return [Phase("score", score_phase), Phase("decide", decide_phase, over=DRIVER),
                Phase("apply", columns_of, over=APPLY, arg=lambda run: run.state.thresholds)]

    def apply_partition(self, df: pd.DataFrame, info: Any = None) -> Applied:
        if info is None:
            raise RuntimeError("langid: min_score fineweb2 runs as phases, not partition by partition")
        cols, per_language = info
        if len(df) != len(cols) or not np.array_equal(df["doc_index"].to_numpy(), cols["doc_index"].to_numpy()):
            raise RuntimeError("langid: a partition changed between the two passes of min_score: fineweb2")
        df = df.assign(**{c: cols[c].values for c in cols.columns if c != "doc_index"})
        return Applied(df, self.reasons(df, per_language), rule_counts(df))


def score_phase(stage: LangIdTwoPass, task: Task) -> dict[str, tuple[list, list]]:
    from gpupipe.backend import read_frame

    df = stage.transform(read_frame(task.item, "cpu"))
    new = [c for c in ("lang_raw", "lang", "lang_score", "lang_rule", "lang_script", "lang_mix") if c in df.columns]
    task.exchange.put(COLUMNS, task.index, df[["doc_index", *new]].reset_index(drop=True))
    scored = df[df["lang"] != UNDETERMINED]
    out = {}
    for lang, s in scored.groupby("lang")["lang_score"]:
        v, c = np.unique(s.to_numpy(), return_counts=True)
        out[lang] = (v.tolist(), c.tolist())
    return out


def decide_phase(stage: LangIdTwoPass, run: PhaseRun) -> None:
    merged: dict[str, Counter] = {}
    for part in run.results["score"]:
        for lang, (v, c) in part.items():
            merged.setdefault(lang, Counter()).update(dict(zip(v, c)))
    thresholds = {}
    for lang, hist in sorted(merged.items()):
        thresholds[lang] = fineweb2_threshold(np.array(list(hist), np.float64), np.array(list(hist.values())))
        run.extra[f"min_score_{lang}"] = thresholds[lang]
    run.state.thresholds = thresholds


def columns_of(stage: LangIdTwoPass, task: Task) -> tuple[pd.DataFrame, dict[str, float]]:
    cols = task.exchange.get(COLUMNS, task.index)
    return cols, {**task.arg, "default": 0.0}
