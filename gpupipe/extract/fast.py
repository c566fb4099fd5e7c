"""A fast main-text extractor on selectolax's Lexbor DOM: one pass cuts the page into text blocks, a second picks
the subtree with the most content-like text net of boilerplate, a third keeps that subtree's good blocks.

1. Cleaning (Lexbor, C): elements that never hold main text (script, style, nav, footer, aside, forms' controls,
   media, hidden elements) are removed; boilerplate by class/id (share bars, related links, comment sections,
   cookie banners, ...) is marked, unless the marked element holds most of the page's text (a wrapper class such
   as `has-sidebar`, or a forum whose posts are the page).
2. Blocks (one iterative walk, no recursion limit): paragraph-like elements (p, h1-h6, li, pre, blockquote, dd,
   table rows, divs with their own text, ...) become blocks with their text, link-text share, tag and ancestors.
3. Scoring, in the way of trafilatura/jusText's text and link density: a block's value is its length when it looks
   like prose (long enough, few links, not inside boilerplate), negative when it looks like boilerplate (link lists,
   marked containers), about zero otherwise. The main container is the element whose blocks sum highest (a
   maximum-subtree search: it widens over a split article and stops at menus and link lists).
4. Output: the container's blocks in document order, dropping the boilerplate ones and short neutral ones that
   stand alone; headings as lines of their own, table rows as cells joined by " | ", <pre> kept verbatim.

`extract_text(html)` returns the text and a few cheap signals (`Result`); the stage's cascade uses them to decide
when a page goes to trafilatura instead.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from selectolax.lexbor import LexborHTMLParser

# Never main text. (form is not here: some sites wrap the whole page in one; its controls are.)
DROP_TAGS = ["script", "style", "noscript", "template", "svg", "math", "canvas", "iframe", "object", "embed",
             "video", "audio", "map", "picture", "img", "button", "select", "option", "textarea", "input", "label",
             "nav", "footer", "aside", "menu", "dialog", "head", "link", "meta", "source", "track", "figure"]
HIDDEN_CSS = '[hidden], [aria-hidden="true"], [style*="display:none"], [style*="display: none"], ' \
             '[style*="visibility:hidden"], [style*="visibility: hidden"]'

BLOCK_TAGS = frozenset("p h1 h2 h3 h4 h5 h6 li pre blockquote dd dt div section article main header td th tr "
                       "table ul ol dl figcaption caption address details summary center body form fieldset "
                       "legend hr br".split())
HEADINGS = frozenset("h1 h2 h3 h4 h5 h6".split())
# class/id words of boilerplate containers (matched as whole words between - _ and spaces). Strong words mark any
# element holding less than STRONG_SHARE of the page's text; weak ones (used for small parts of articles as often
# as for page furniture: Blogger's main post sits in a "widget") only elements with little text of their own.
STRONG_RE = re.compile(
    r"(?:^|[-_\s])(?:nav|navbar|navigation|menu|menubar|footer|sidebar|share|sharing|social|socials|related|"
    r"comments?|cookies?|consent|gdpr|newsletter|subscribe|subscription|promo|advert|advertisement|"
    r"breadcrumbs?|popup|modal|signup|login|recommended|recirc|most-popular|trending|outbrain|taboola|disqus|"
    r"pagination|pager|toolbar|masthead|copyright|more-stories|read-more|see-also|sr-only|visually-hidden|"
    r"screen-reader-text|gallery|carousel|slideshow|slider|lightbox)(?:$|[-_\s])", re.I)
WEAK_RE = re.compile(
    r"(?:^|[-_\s])(?:ads|ad|banner|widget|byline|author|tags|tag-list|topics|meta|popular|skip|print|email|jump|"
    r"caption|credit|timestamp|date|dateline|published|updated|rating|hidden)(?:$|[-_\s])", re.I)
STRONG_SHARE = 0.4
BOILER_WEIGHT = 0.6
WEAK_CHARS = 200
WS_RE = re.compile(r"[ \t\r\f\v\u00a0\u200b]+")
NL_RE = re.compile(r" *\n[\s]*")


@dataclass
class Block:
    text: str
    link_chars: int
    tag: str
    path: tuple          # mem_ids of the ancestors, outermost first
    boiler: bool
    value: float = 0.0


@dataclass
class Result:
    text: str
    page_chars: int      # text of all blocks on the cleaned page
    content_chars: int   # text of the blocks kept
    blocks: int


def _class_id(node) -> str:
    a = node.attributes
    c, i = a.get("class"), a.get("id")
    return f"{c or ''} {i or ''}" if (c or i) else ""


def _clean(tree) -> None:
    for node in tree.css(HIDDEN_CSS):
        if node.tag not in ("html", "body"):
            node.decompose()
    tree.strip_tags(DROP_TAGS)


def _marked_boilerplate(body, page_chars: int) -> set:
    """mem_ids of elements whose class/id says boilerplate and that do not hold most of the page's text."""
    marked = set()
    for node in body.traverse(include_text=False):
        ci = _class_id(node)
        if not ci or node.tag in ("html", "body", "main", "article"):
            continue
        strong = STRONG_RE.search(ci) is not None
        if strong or WEAK_RE.search(ci):
            n = len(node.text(deep=True, separator=" ", strip=True))
            if n < (STRONG_SHARE * page_chars if strong else WEAK_CHARS):
                marked.add(node.mem_id)
    return marked


def _blocks(body, marked: set) -> list[Block]:
    """Cut the body into blocks with one iterative walk (no recursion: pathological nesting is fine)."""
    blocks: list[Block] = []
    parts: list[str] = []
    link = [0]
    path: list[int] = []
    tags: list[str] = []
    boiler_depth = [0]  # >0 while inside a marked element
    in_link = [0]
    in_pre = [0]

    def flush(tag: str) -> None:
        if parts:
            raw = "".join(parts)
            parts.clear()
            if in_pre[0]:
                text = raw.strip("\n")
            elif tag == "tr":
                text = WS_RE.sub(" ", raw.replace("\n", " ")).strip(" |")
            else:
                text = NL_RE.sub("\n", WS_RE.sub(" ", raw)).strip()
            if text:
                blocks.append(Block(text, link[0], tag, tuple(path), boiler_depth[0] > 0))
        link[0] = 0

    def block_tag() -> str:
        for t in reversed(tags):
            if t in BLOCK_TAGS:
                return t
        return "body"

    # stack of (node, entering); on exit we flush if it is a block
    stack = [(body, True)]
    while stack:
        node, entering = stack.pop()
        tag = node.tag
        if tag == "-text":
            t = node.text_content
            if t:
                parts.append(t)
                if in_link[0]:
                    link[0] += len(t.strip())
            continue
        if tag is None or tag.startswith("-"):   # comments, doctype
            continue
        is_block = tag in BLOCK_TAGS
        if entering:
            if tag == "br":
                parts.append("\n")
                continue
            if tag == "hr":
                flush(block_tag())
                continue
            if tag in ("td", "th") and tags and tags[-1] == "tr" and _row_is_data(tags):
                parts.append(" | " if parts else "")
                is_block = False
            if is_block:
                flush(block_tag())
            path.append(node.mem_id)
            tags.append(tag)
            if node.mem_id in marked:
                boiler_depth[0] += 1
            if tag == "a":
                in_link[0] += 1
            if tag == "pre":
                in_pre[0] += 1
            stack.append((node, False))
            children = list(node.iter(include_text=True))
            stack.extend((c, True) for c in reversed(children))
        else:
            if is_block and not (tag in ("td", "th") and _row_is_data(tags[:-1])):
                flush(tag)
            elif tag == "tr" and _row_is_data(tags):
                flush("tr")
            path.pop()
            tags.pop()
            if node.mem_id in marked:
                boiler_depth[0] -= 1
            if tag == "a":
                in_link[0] -= 1
            if tag == "pre":
                in_pre[0] -= 1
    flush("body")
    return blocks


def _row_is_data(tags: list[str]) -> bool:
    """Directly inside a table row: its cells are joined into one line."""
    return bool(tags) and tags[-1] == "tr"


def _value(b: Block) -> float:
    n = len(b.text)
    ld = b.link_chars / n if n else 0.0
    # boilerplate counts against a container, but less than prose for it: an article body with a related-links
    # box inside is still the article (the box is dropped at output)
    if b.boiler:
        return -BOILER_WEIGHT * n - 20.0
    if ld > 0.5:
        return -BOILER_WEIGHT * n - 10.0
    if b.tag in HEADINGS:
        return 0.0
    if b.tag == "pre":
        return float(n)
    if b.text[0] == "<" and b.text[-1] == ">":   # markup left as text (a noscript's or a CMS's raw HTML)
        return -n - 10.0
    if b.tag == "tr":                             # a data table's row: worth keeping, less than prose
        return 0.3 * n if n >= 20 and ld < 0.3 else 0.0
    long_enough = n >= 80 or (n >= 40 and b.text[-1:] in ".!?。！？:;»\"”)")
    if long_enough:
        return n * (1.0 - ld)
    return -5.0


def extract_text(html: str, tables: bool = True) -> Result:
    tree = LexborHTMLParser(html)
    body = tree.body
    if body is None:
        return Result("", 0, 0, 0)
    _clean(tree)
    if not tables:
        tree.strip_tags(["table"])
    page_chars = len(body.text(deep=True, separator=" ", strip=True))
    marked = _marked_boilerplate(body, page_chars)
    blocks = _blocks(body, marked)
    if not blocks:
        return Result("", page_chars, 0, 0)
    # maximum subtree: each block's value counts for every ancestor
    sums: dict = {}
    depth: dict = {}
    for b in blocks:
        b.value = _value(b)
        for d, anc in enumerate(b.path):
            sums[anc] = sums.get(anc, 0.0) + b.value
            depth[anc] = d
    best = max(sums.values())
    # the deepest element within 5% of the best sum (a wrapper adding only neutral blocks is not preferred)
    top = max((a for a, s in sums.items() if s >= best - 0.05 * abs(best)), key=lambda a: depth[a])
    keep = _select([b for b in blocks if top in b.path])
    text = "\n".join(b.text for b in keep)
    return Result(text, sum(len(b.text) for b in blocks), len(text), len(keep))


def _select(blocks: list[Block]) -> list[Block]:
    """Good blocks, plus headings and short neutral ones that sit next to good ones (jusText's context rule)."""
    good = [b.value > 0 for b in blocks]
    out = []
    seen = set()
    for i, b in enumerate(blocks):
        if b.text in seen:       # a repeated caption or teaser
            continue
        seen.add(b.text)
        if good[i]:
            out.append(b)
        elif b.value >= -5.0 and not b.boiler:
            nxt = next((good[j] for j in range(i + 1, min(i + 3, len(blocks)))), False)
            prv = good[i - 1] if i else False
            if (b.tag in HEADINGS and nxt) or (prv and nxt) or b.tag == "tr":
                out.append(b)
    return out
