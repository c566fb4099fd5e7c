"""A fast main-text extractor on selectolax's Lexbor DOM: one pass cuts the page into text blocks, a second picks
the subtree with the most content-like text net of boilerplate, a third keeps that subtree's blocks less boilerplate.

1. Cleaning (Lexbor, C): elements that never hold main text (script, style, nav, footer, aside, forms' controls,
   media, hidden elements, schema.org metadata cards) are removed (an <aside> or <noscript> that holds half of the
   page's text is kept: some CMSs wrap the article in one); boilerplate by class/id words (share bars,
   related links, comment sections, captions, author bios, cookie banners, ...; camelCase names split into words) is
   marked, unless the marked element, or all elements of its class together, hold much of the page's text (a wrapper
   class such as `has-sidebar`; the posts of a forum thread). Elements named as an article's body ("article-body",
   "entry-content", itemprop=articleBody) are noted, and never marked ("article-content sticky-sidebar").
2. Blocks (one iterative walk, no recursion limit): paragraph-like elements (p, h1-h6, li, pre, blockquote, dd,
   table rows, divs with their own text, ...) become blocks with their text, link-text share, tag and ancestors.
3. Scoring, in the way of trafilatura/jusText's text and link density: a block's value is its length (CJK characters
   weighted) when it looks like prose (long enough, few links, not inside boilerplate), negative when it looks like
   boilerplate (link-dense with little text of its own, marked containers), about zero otherwise. The main
   container is the element whose blocks sum highest (a maximum-subtree search: it widens over a split article and
   stops at menus and link lists), narrowed to a content-named element inside it that holds most of its value. The
   prose blocks just above it, up to the title, join it: a lead paragraph in a sibling of the body's element, past a
   byline or a caption.
4. Output: the container's blocks in document order less the boilerplate ones (short neutral lines, headings, list
   items and repeated lines stay, as trafilatura keeps them, unless they introduce a dropped block: "Read more:");
   headings as lines of their own, table rows as cells joined by " | ", <pre> kept verbatim, the text in NFC. With
   `comments=True` (the stage's include_comments) the readers' comments follow: the blocks of the repeated comment
   items inside a comment thread, less its reply form, titles and author/date lines, as trafilatura appends them; a
   thread without one comment of prose (a policy, "Loading...") adds nothing.

5. Page kinds (#33): the page's largest group of repeated sibling items (a listing's rows, a collection's cards, a
   service page's sections) joins the container, link titles included (_items, _with_items); a hidden element that
   holds most of the page's text is kept (a script shows it), and so are folded panels (an accordion's or an
   expander's, React's streamed segments: _folded); a schema.org Product card's description leads a shop page whose
   HTML holds less (once: not where the HTML has it already). On a product's page (_product) customer reviews are
   boilerplate, and a page fast kept nearly whole reports no prose found, so that auto leaves it to trafilatura.
   There, too, sliders and galleries show the product (not boilerplate), hidden tab panels are kept (its
   specifications tab), and its text says each line once, less lines of machine tokens (said_once).
   docs/design.md "Page kinds" has the rules and their measurements.

`extract_text(html)` returns the text and a few cheap signals (`Result`); the stage's cascade (`auto`) uses them to
decide when a page goes to trafilatura instead. The constants were set on the tune halves of the benchmark's page
sets only (profiling/bench_extract.py; docs/design.md "Main-text extraction").
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections import Counter
from dataclasses import dataclass, field
from itertools import repeat

from selectolax.lexbor import LexborHTMLParser

from gpupipe.kernels.script_class import CJK_TEXT, regex_class

# Never main text. (form is not here: some sites wrap the whole page in one; its controls are.)
DROP_TAGS = ["script", "style", "noscript", "template", "svg", "math", "canvas", "iframe", "object", "embed",
             "video", "audio", "map", "picture", "img", "button", "select", "option", "textarea", "input", "label",
             "nav", "footer", "aside", "menu", "dialog", "head", "link", "meta", "source", "track", "figure"]
UNLESS_MOST = ("aside", "noscript")   # dropped unless one holds most of the page's text
DROP_FIRST = [t for t in DROP_TAGS if t not in UNLESS_MOST]
HIDDEN_CSS = '[hidden], [aria-hidden="true"], [style*="display:none"], [style*="display: none"], ' \
             '[style*="visibility:hidden"], [style*="visibility: hidden"]'

# schema.org metadata about the page (publisher, logo, image, author cards), hidden by the site's CSS
PRODUCT_CSS = '[itemtype*="schema.org/Product"], meta[property="og:type"][content="product"]'
STRUCT_CSS = '[itemprop="publisher"], [itemprop="image"][itemscope], [itemprop="logo"], [itemprop="author"][itemscope]'
BLOCK_TAGS = frozenset("p h1 h2 h3 h4 h5 h6 li pre blockquote dd dt div section article main header td th tr "
                       "table ul ol dl figcaption caption address details summary center body form fieldset "
                       "legend hr br".split())
HEADINGS = frozenset("h1 h2 h3 h4 h5 h6".split())
# class/id words of boilerplate containers, matched as whole words between - _ and spaces (camelCase names split:
# "InlineImage-imageEmbedCaption" -> inline image image embed caption), or as pairs of adjacent words. Strong words
# mark any element holding less than STRONG_SHARE of the page's text; weak ones (used for small parts of articles as
# often as for page furniture: Blogger's main post sits in a "widget") only elements with little text of their own.
STRONG_WORDS = frozenset(
    "nav navbar navigation menu menubar footer sidebar share sharing social socials related comment comments cookie "
    "cookies consent gdpr newsletter subscribe subscription promo advert advertisement breadcrumb breadcrumbs popup "
    "modal signup login recommended recirc trending outbrain taboola disqus pagination pager toolbar masthead "
    "copyright gallery carousel slideshow slider lightbox caption credit figcaption legend keypoints disclaimer "
    "disclosure affiliate kommentar kommentare respond".split())
STRONG_PAIRS = frozenset(tuple(p.split("-")) for p in "most-popular more-stories read-more see-also sr-only "
                         "visually-hidden screen-reader key-points summary-box author-bio author-box author-card "
                         "author-description author-section author-info about-author".split())
WEAK_WORDS = frozenset("ads ad banner widget byline author tags topics meta popular skip print email jump timestamp "
                       "date dateline published updated rating hidden".split())
WEAK_PAIRS = frozenset({("tag", "list")})
# class/id of the element that holds an article's or post's body (as trafilatura's BODY_XPATH and readability's
# positive names): "article-body", "post_content", "entryContent", "story-body", or a class token that is just
# "content", "entry" or "text"
CONTENT_PAIRS = frozenset((a, b) for a in "article post entry story blog main page rich news".split()
                          for b in "body content text entry".split())
CONTENT_WORDS = frozenset(a + b for a, b in CONTENT_PAIRS)
CONTENT_TOKENS = frozenset("content entry text".split())
# readers' comments (include_comments): the outermost element whose class/id has one of these words holds a
# comment thread; inside it, elements with a DISCARD word (the reply form, its title, the spam notice, per-comment
# author/date lines) are left out, as trafilatura's COMMENTS_XPATH / COMMENTS_DISCARD_XPATH do
COMMENT_WORDS = frozenset("comment comments commentlist kommentare kommentar disqus".split())
COMMENT_DISCARD = frozenset("respond reply form title akismet nocomments signin login meta metadata author "
                            "awaiting moderation pingback trackback navigation nav".split())
# class/id words of a folded panel that holds page text (an accordion's, an expander's: _folded), and of the hidden
# layers that do not (dialogs, popups, menus)
FOLDED_WORDS = frozenset("accordion collapse collapsible collapsed expander expandable".split())
FOLDED_NOT = frozenset("modal dialog popup overlay menu nav navigation cookie cookies consent".split())
# on a product's page (_product) a customer review ("review", one per review, or the widget that lists them) is
# boilerplate too: the product's text is its description and specifications (WCXB choose half, product pages:
# 0.639 -> 0.645; "reviews" too, which also names the rating summary kept with the product: 0.639)
# ... and its sliders, carousels and galleries are not: there they show the product itself (a landing page's feature
# slides, its testimonials, captioned photos), not other stories (choose half, product 0.6449 -> 0.6555; services
# -0.0002, other kinds unchanged)
PRODUCT_SHOWS = frozenset("slider carousel gallery slideshow".split())
PRODUCT_STRONG = (STRONG_WORDS - PRODUCT_SHOWS) | {"review"}
# a product's page keeps its hidden tab panels too (role="tabpanel", class "tab-pane"): the specifications tab beside
# the description (choose half, product +0.004; on every page a forum's hidden notification-help dialog of tabs took
# the container, forum -0.009, so products only)
TAB_WORDS = frozenset("tabpanel tabpane".split())
TAB_PAIRS = frozenset({("tab", "pane"), ("tab", "panel")})
SPLIT_RE = re.compile(r"[-_\s]+")
DIGITS_RE = re.compile(r"\d+")
CAMEL_RE = re.compile(r"([a-z])(?=[A-Z])")
STRONG_SHARE = 0.4
ASIDE_SHARE = 0.5
WEAK_CHARS = 200
# the main container: the outermost content-named element inside the best subtree whose blocks sum to at least this
# share of the best sum is preferred to the best subtree itself (which may add teaser cards or a key-points box)
CONTENT_SHARE = 0.5
BOILER_WEIGHT = 0.6
# the lead above the container is looked for across at most this many characters of boilerplate blocks
LEAD_GAP = 300
# a link-dense block (over half its text in links) is boilerplate unless it has this many characters of its own (a
# list item "<a>headline</a>. Two sentences of summary." is content; trafilatura too tests link density only on
# short elements)
LINK_OWN_CHARS = 50
# a CJK character counts as this many characters in the length tests (one carries about a word's worth)
CJK_WEIGHT = 3
# listings and collections (#33): the page's largest group of repeated siblings (_items) with at least MIN_ITEMS
# items of ITEM_CHARS characters on average (shorter: a menu, a tag cloud); a group outside the main container joins
# it where the container kept under ITEMS_BESIDE characters. Chosen on the choose half of WCXB's dev split
# (profiling/bench_extract.py --wcxb; docs/design.md "Page kinds").
MIN_ITEMS = 3
ITEM_CHARS = 20
ITEMS_BESIDE = 2000
ITEM_OWN = 40
ITEMS_ARTICLE = 2000
NOT_ITEMS = frozenset({"p"})
CONTAINED_SHARE = 0.6
# a product's page (_product) where fast kept this share of the page's text or more is left to trafilatura (auto):
# chosen on WCXB's choose half, product 0.612 -> 0.639 (0.75; 0.85: 0.623), other kinds within 0.0005
PRODUCT_WHOLE = 0.75
MACHINE_WORDS = 20
WORD_RE = re.compile(r"\w+")
CJK_RE = re.compile(regex_class(CJK_TEXT, "python"))   # CJK text, punctuation included (kernels/script_class.py)
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
    comment: bool = False   # inside a comment thread (include_comments), not inside its discarded parts


@dataclass
class Result:
    text: str
    page_chars: int      # text of all blocks on the cleaned page
    content_chars: int   # text of the blocks kept
    blocks: int
    tree: LexborHTMLParser | None = field(default=None, repr=False)   # the cleaned page (auto's fallback reads it)
    prose: float = 0.0        # the page's prose: the summed values of its blocks that read as prose
    prose_kept: float = 0.0   # the part of it in the kept blocks (0 on a product's page kept nearly whole)
    product: bool = False     # a product's page (a schema.org Product card or microdata, og:type product)

    def cleaned_html(self) -> str | None:
        """The page less what cleaning removed (scripts, styles, menus, footers, hidden parts, media), as HTML."""
        return self.tree.html if self.tree is not None else None


def _class_kinds(a: dict, strong_words: frozenset = STRONG_WORDS) -> tuple[bool, bool, bool]:
    """(strong boilerplate, weak boilerplate, content) words in an element's class and id."""
    c, i = a.get("class"), a.get("id")
    if not (c or i):
        return False, False, False
    ci = f"{c or ''} {i or ''}"
    if not ci.islower():
        ci = CAMEL_RE.sub(r"\1 ", ci).lower()
    words = SPLIT_RE.split(ci.strip())
    pairs = set(zip(words, words[1:])) if len(words) > 1 else ()
    return (not strong_words.isdisjoint(words) or not STRONG_PAIRS.isdisjoint(pairs),
            not WEAK_WORDS.isdisjoint(words) or not WEAK_PAIRS.isdisjoint(pairs),
            not CONTENT_WORDS.isdisjoint(words) or not CONTENT_PAIRS.isdisjoint(pairs)
            or not CONTENT_TOKENS.isdisjoint(f"{c or ''} {i or ''}".lower().split()))


def _words(a: dict) -> list[str]:
    ci = f"{a.get('class') or ''} {a.get('id') or ''}"
    if not ci.islower():
        ci = CAMEL_RE.sub(r"\1 ", ci).lower()
    return SPLIT_RE.split(ci.strip())


def _comment_parts(body) -> tuple[set, set, set]:
    """mem_ids of the outermost comment-thread elements, of the comment items inside them (elements below a thread
    that have a comment word: "comment", "comment-body", "comment__content", ...: the thread's own text outside
    them, such as its policy, a "Loading..." or "Join the discussion" line, is not a comment) and of the discarded
    elements inside the threads."""
    threads, discard = set(), set()
    candidates, key_count = [], Counter()
    for node in body.css('[class*="omment"], [id*="omment"], [class*="disqus"], [id*="disqus"]'):
        a = node.attributes
        if node.tag in ("html", "body") or COMMENT_WORDS.isdisjoint(_words(a)):
            continue
        p, inside = node.parent, False
        while p is not None:
            if p.mem_id in threads:
                inside = True
                break
            p = p.parent
        if inside:
            keys = {DIGITS_RE.sub("", t) for t in f"{a.get('class') or ''} {a.get('id') or ''}".split()}
            candidates.append((node.mem_id, keys))
            key_count.update(keys)
        else:
            threads.add(node.mem_id)
    # an item's class (or id less its digits) is repeated: one per comment; a lone comment-named part of the thread
    # is its header, policy or "Loading..." line
    items = {m for m, keys in candidates if any(key_count[k] >= 2 for k in keys)}
    for thread in [n for n in body.traverse(include_text=False) if n.mem_id in threads]:
        for node in thread.css("[class], [id]"):
            if not COMMENT_DISCARD.isdisjoint(_words(node.attributes)) \
                    or (node.attributes.get("id") or "").startswith("respond"):
                discard.add(node.mem_id)
    return threads, items, discard


def _clean(tree, product: bool = False) -> None:
    tree.strip_tags(DROP_FIRST)
    # a hidden element that holds most of the page's text is the page, shown by its script: an anti-flicker wrapper
    # (style="visibility:hidden" until the scripts load), React's streamed <div hidden id="S:0"> (#33: 5 pages of
    # WCXB's choose half, all of their text)
    total = None
    for node in tree.css(HIDDEN_CSS + ", " + STRUCT_CSS):
        if node.tag in ("html", "body") or _folded(node.attributes, product):
            continue
        if node.tag == "div" and "itemprop" not in node.attributes:
            total = total if total is not None else len(tree.body.text(deep=True, separator=" ", strip=True))
            if len(node.text(deep=True, separator=" ", strip=True)) >= ASIDE_SHARE * total > 0:
                continue
        node.decompose()
    # an <aside> or <noscript> that holds most of the page's text is the page's content (a CMS that wraps the article
    # in an aside; a Blogger template that puts the post in a noscript), not a sidebar: it is unwrapped, not dropped
    for tag in UNLESS_MOST:
        found = tree.css(tag)
        if found:
            total = len(tree.body.text(deep=True, separator=" ", strip=True))
            for node in found:
                if len(node.text(deep=True, separator=" ", strip=True)) >= ASIDE_SHARE * total:
                    node.unwrap()
                    break
            tree.strip_tags([tag])


def _folded(a: dict, product: bool = False) -> bool:
    """A hidden element that the page shows on a click or by its script, whose text is the page's: an accordion's or
    an expander's folded panel (a product's specifications, a service page's FAQ answers), a React streamed segment
    (`<div hidden id="S:2">`, moved into place by the page's script), and on a product's page a tab panel (its
    specifications beside the description). A dialog or modal stays hidden."""
    i = a.get("id") or ""
    if i.startswith("S:") and "hidden" in a:
        return True
    if a.get("role") == "dialog" or "itemprop" in a:
        return False
    if product and a.get("role") == "tabpanel":
        return True
    if not (a.get("class") or i):
        return False
    words = _words(a)
    if not FOLDED_NOT.isdisjoint(words):
        return False
    if not FOLDED_WORDS.isdisjoint(words):
        return True
    return product and (not TAB_WORDS.isdisjoint(words) or not TAB_PAIRS.isdisjoint(zip(words, words[1:])))


def _marked_boilerplate(body, page_chars: int, sig: dict, strong_words: frozenset = STRONG_WORDS) -> tuple[set, set]:
    """mem_ids of elements whose class/id says boilerplate and that do not hold most of the page's text, and of the
    elements whose class/id (or itemprop=articleBody) names them as the body of an article or post.

    The share is also taken over all elements of the same class: the posts of a forum thread ("comment", ...) are
    each a small part of the page but together they are the page. `strong_words` is PRODUCT_STRONG on a product's
    page (its customer reviews are boilerplate there)."""
    marked, content = set(), set()
    strong_nodes: list[tuple[int, str]] = []
    class_chars: dict[str, int] = {}
    for node in body.traverse(include_text=False):
        a = node.attributes
        sig[node.mem_id] = (node.tag, DIGITS_RE.sub("", (a.get("class") or "").split(" ")[0]) if a else "")
        if not a:
            continue
        strong, weak, named = _class_kinds(a, strong_words)
        if (named or a.get("itemprop") == "articleBody") and node.tag not in ("html", "body"):
            content.add(node.mem_id)
        if named:   # "article-content sticky-sidebar", "entry share": the content name wins
            continue
        if not (strong or weak) or node.tag in ("html", "body", "main", "article"):
            continue
        n = len(node.text(deep=True, separator=" ", strip=True))
        if not strong:
            if n < WEAK_CHARS:
                marked.add(node.mem_id)
        elif n < STRONG_SHARE * page_chars:
            key = a.get("class") or ""
            class_chars[key] = class_chars.get(key, 0) + n
            strong_nodes.append((node.mem_id, key))
    marked.update(m for m, key in strong_nodes
                  if not key or class_chars[key] < STRONG_SHARE * page_chars)
    return marked, content


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
            stack.extend(zip(reversed(children), repeat(True)))
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


def _length(text: str) -> int:
    """Characters, with CJK ones weighted (CJK_WEIGHT)."""
    if text.isascii():
        return len(text)
    return len(text) + (CJK_WEIGHT - 1) * len(CJK_RE.findall(text))


def _value(b: Block) -> float:
    n = len(b.text)
    ld = b.link_chars / n if n else 0.0
    m = _length(b.text)
    # boilerplate counts against a container, but less than prose for it: an article body with a related-links
    # box inside is still the article (the box is dropped at output)
    if b.boiler:
        return -BOILER_WEIGHT * n - 20.0
    if ld > 0.5 and m * (1.0 - ld) < LINK_OWN_CHARS:
        return -BOILER_WEIGHT * n - 10.0
    if b.tag in HEADINGS:
        return 0.0
    if b.tag == "pre":
        return float(n)
    if b.text[0] == "<" and b.text[-1] == ">":   # markup left as text (a noscript's or a CMS's raw HTML)
        return -n - 10.0
    if b.tag == "tr":                             # a data table's row: worth keeping, less than prose
        return 0.3 * n if n >= 20 and ld < 0.3 else 0.0
    long_enough = m >= 80 or (m >= 40 and b.text[-1:] in ".!?。！？:;»\"”)")
    if long_enough:
        return m * (1.0 - ld)
    return -5.0


def extract_text(html: str, tables: bool = True, comments: bool = False) -> Result:
    tree = LexborHTMLParser(html)
    body = tree.body
    if body is None:
        return Result("", 0, 0, 0)
    is_product, product = _product(tree)
    _clean(tree, is_product)
    if not tables:
        tree.strip_tags(["table"])
    page_chars = len(body.text(deep=True, separator=" ", strip=True))
    sig: dict = {}   # mem_id -> (tag, first class name less digits): what makes siblings items of one list
    marked, content = _marked_boilerplate(body, page_chars, sig,
                                          PRODUCT_STRONG if is_product else STRONG_WORDS)
    blocks = _blocks(body, marked)
    if not blocks:
        return Result("", page_chars, 0, 0, tree)
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
    top, named = _narrowed(top, blocks, content, sums, depth, best)
    first = next(i for i, b in enumerate(blocks) if top in b.path)
    last = max(i for i, b in enumerate(blocks) if top in b.path)   # a subtree's blocks are contiguous
    keep = _select(blocks[_lead(blocks, first):last + 1])
    # a container narrowed to an element named as the body: items outside it are not the page (a widened
    # guard, any content-named ancestor, cost 0.09 F1 on listings of the choose half: "main-content" is everywhere)
    keep = _with_items(blocks, keep, _items(blocks, sig), blocks[first].path[:depth[top] + 1], beside=not named)
    if comments:
        keep += _comments(body, [b for b in blocks if top not in b.path])
    text = "\n".join(b.text for b in keep)
    if product and len(product) > len(text) and not _contained(product, text):
        text = f"{product}\n{text}" if text else product   # a shop page whose description is only in its card
    if not text.isascii():   # composed characters, as trafilatura returns them (some CMSs write "u" + U+0308)
        text = unicodedata.normalize("NFC", text)
    if is_product:   # said once before the kept share is taken (choose half, product 0.6667 if after, 0.6681)
        text = said_once(text)
    page_text = sum(len(b.text) for b in blocks)
    prose = sum(b.value for b in blocks if b.value > 0)
    prose_kept = sum(b.value for b in keep if b.value > 0)
    if is_product and len(text) >= PRODUCT_WHOLE * page_text:
        # a product's page kept (nearly) whole: the container is the page, add-to-cart lines, reviews, shipping
        # notes and the shop's pitch with the product's text; none of its prose counts as found, so auto's prose-share
        # rule sends it to trafilatura, whose finer pruning keeps less of that
        prose_kept = 0.0
    return Result(text, page_text, len(text), len(keep), tree, prose=prose, prose_kept=prose_kept,
                  product=is_product)


def _narrowed(top, blocks: list[Block], content: set, sums: dict, depth: dict, best: float) -> tuple:
    """(the container, whether a content-named element narrowed it): a content-named element inside `top` that
    holds most of its value narrows it (the outermost such: an article split into several "post-content" sections
    around figures is kept whole; of two as deep and as valuable, the first on the page). Candidates in page order,
    never a set's: mem_ids are addresses, so a set of them iterates in another order in each process, and min()
    would break a tie differently (the same page gave two texts in two processes)."""
    inside = dict.fromkeys(a for b in blocks if top in b.path for a in b.path[depth[top]:])
    named = [a for a in inside if a in content and sums[a] >= CONTENT_SHARE * best > 0]
    return (min(named, key=lambda a: (depth[a], -sums[a])), True) if named else (top, False)


def said_once(text: str) -> str:
    """The text less its repeated lines (the first of each kept): a product's page repeats its parts for each screen
    size and each variant (a spec list per platform, the price and title in a sticky bar), and WCXB's references
    say each line once (choose half, product 0.6449 -> 0.6531, with auto's fallback text too 0.6541; on every page's
    text, forum +0.039 but documentation -0.012, listing -0.013, service -0.009: products only)."""
    seen, out = set(), []
    for line in text.split("\n"):
        key = line.strip()
        if key not in seen:
            seen.add(key)
            if not _machine(key):
                out.append(line)
    return "\n".join(out)


def _machine(line: str) -> bool:
    """A line of machine tokens, not words: MACHINE_WORDS or more \\w+ tokens, at least half of them mixing letters
    and digits (ids, hashes: a shop's obfuscated "Sponsored" labels)."""
    if len(line) < 2 * MACHINE_WORDS or not any(c.isdigit() for c in line):
        return False
    words = WORD_RE.findall(line)
    return len(words) >= MACHINE_WORDS and 2 * sum(
        not w.isalpha() and not w.isdigit() and any(c.isalpha() for c in w) for w in words) >= len(words)


def _items(blocks: list[Block], sig: dict) -> set:
    """mem_ids of the page's largest group of repeated items (a listing's entries, a collection's cards, a results
    table's rows): the children of one element that share a tag and first class name (digits aside), at least
    MIN_ITEMS of them, with ITEM_CHARS or more on average, counted over the blocks that are not boilerplate (a
    marked menu is no group). Empty where the page has none."""
    chars: dict = {}
    kids: dict = {}
    for b in blocks:
        if b.boiler:
            continue
        n, p = len(b.text), b.path
        for j, a in enumerate(p):
            chars[a] = chars.get(a, 0) + n
            if j:   # an ordered set (a dict), in page order: see extract_text's `inside`
                kids.setdefault(p[j - 1], {})[a] = None
    best, best_chars = set(), 0
    for ks in kids.values():
        if len(ks) < MIN_ITEMS:
            continue
        key, n = Counter(sig.get(k) for k in ks).most_common(1)[0]
        if n < MIN_ITEMS or key is None or key[0] in NOT_ITEMS:
            continue
        group = [k for k in ks if sig.get(k) == key]
        total = sum(chars[k] for k in group)
        if total >= ITEM_CHARS * len(group) and total > best_chars:
            best, best_chars = set(group), total
    return best


def _with_items(blocks: list[Block], keep: list[Block], items: set, top_path: tuple, beside: bool) -> list[Block]:
    """The kept blocks and the item group's blocks (less marked boilerplate), in document order. Items inside the
    container join with their link-dense blocks (a listing's titles are links). Where the container is in one of
    the items (a page of sibling sections), the other items join with the blocks _select keeps (their prose, not
    the headline lists beside an article). A group outside the container joins it only where `beside` (the
    container is not narrowed to an element named as the body) and the container kept under ITEMS_BESIDE of prose:
    beside an article, a list of teasers or an archive is not the page."""
    if not items:
        return keep
    own = [b for b in blocks if not b.boiler and not items.isdisjoint(b.path)]
    if sum(b.value for b in keep if b.value > 0) >= ITEMS_ARTICLE:
        own = _select(own)
    top = top_path[-1]
    holder = next((a for a in top_path if a in items), None)
    if holder is not None:
        others = [b for b in own if holder not in b.path]
        if sum(len(b.text) - b.link_chars for b in others) < ITEM_OWN * (len(items) - 1):
            others = _select(others)   # headline lists: links with little text of their own
        own = [b for b in own if holder in b.path] + others
    elif not any(top in b.path for b in own) and (
            not beside or sum(b.value for b in keep if b.value > 0) >= ITEMS_BESIDE):
        return keep
    ids = {id(b) for b in keep} | {id(b) for b in own}
    return [b for b in blocks if id(b) in ids]


def _product(tree) -> tuple[bool, str]:
    """(the page is a product's, the description in its schema.org Product card or ""). A product's page has Product
    microdata, og:type product, or a JSON-LD Product card named as its title (h1): a listing's or an article's cards
    are named otherwise. The card's description is a shop page's text that may be nowhere else in its HTML (rendered
    by script)."""
    is_product, description = tree.css_first(PRODUCT_CSS) is not None, ""
    title = None
    for node in tree.css('script[type="application/ld+json"]'):
        raw = node.text()
        if "Product" not in raw:
            continue
        try:
            stack = [json.loads(raw)]
        except ValueError:
            continue
        while stack:
            x = stack.pop()
            if isinstance(x, list):
                stack.extend(x)
            elif isinstance(x, dict):
                kind = x.get("@type")
                if not (kind == "Product" or isinstance(kind, list) and "Product" in kind):
                    stack.extend(v for v in x.values() if isinstance(v, (list, dict)))
                    continue
                if not is_product:
                    if title is None:
                        h1 = tree.css_first("h1")
                        title = " ".join(h1.text(deep=True, separator=" ").split()).lower() if h1 is not None else ""
                    name = " ".join(str(x.get("name") or "").split()).lower()
                    is_product = bool(title and name and (title in name or name in title))
                if not description and isinstance(x.get("description"), str):
                    d = x["description"]
                    if "<" in d and ">" in d:   # some shops write the description's HTML into the card
                        d = LexborHTMLParser(d).body.text(deep=True, separator="\n")
                    description = NL_RE.sub("\n", WS_RE.sub(" ", d)).strip()
                if is_product and description:
                    return is_product, description
                stack.extend(v for v in x.values() if isinstance(v, (list, dict)))
    return is_product, description


def _contained(part: str, text: str) -> bool:
    """Most of `part`'s words (CONTAINED_SHARE) are in `text`: a Product card's description that the page's HTML
    already gave (with the lines split otherwise) would be said twice."""
    words = WORD_RE.findall(part.lower())
    if not words:
        return True
    have = set(WORD_RE.findall(text.lower()))
    return sum(w in have for w in words) >= CONTAINED_SHARE * len(words)


def _lead(blocks: list[Block], first: int) -> int:
    """Index of the first block to keep from `first` (the container's first block) back: the prose blocks just above
    the container, where a standfirst or lead paragraph sits in a sibling of the body's element, walking back up to
    the title (h1) across at most LEAD_GAP characters of boilerplate (bylines, captions, share bars between them)."""
    lo, gap = first, 0
    for i in range(first - 1, -1, -1):
        b = blocks[i]
        if b.tag == "h1":
            break
        if b.value > 0:
            lo = i
        elif b.boiler or b.value < -5.0:
            gap += len(b.text)
            if gap > LEAD_GAP:
                break
    return lo


def _select(blocks: list[Block]) -> list[Block]:
    """The container's blocks less boilerplate: prose, and the short neutral ones (headings, list items, table rows,
    short lines) that sit in the container, as trafilatura keeps them; link-dense and marked blocks are dropped.
    Repeated lines are kept (the article repeats them; line-level dedup is a later stage's job): dropping them cost
    F1 on the tune half."""
    keep = [b.value > 0 or (b.value >= -5.0 and not b.boiler) for b in blocks]
    # a short line followed by a dropped block introduces it ("Read more:", a heading over a link list): it goes too
    for i in range(len(blocks) - 1):
        if keep[i] and blocks[i].value <= 0 and not keep[i + 1]:
            keep[i] = False
    return [b for b, k in zip(blocks, keep) if k]


def _comments(body, rest: list[Block]) -> list[Block]:
    """The comment threads' blocks outside the main container (in document order, after the main text, as trafilatura
    appends them): prose and short lines, scored as if the thread were not boilerplate, less the discarded parts
    (reply form, titles, author/date lines) and link-dense blocks."""
    threads, items, discard = _comment_parts(body)
    if not items:
        return []
    out = []
    for b in rest:
        if items.isdisjoint(b.path) or not discard.isdisjoint(b.path):
            continue
        b.boiler = False
        b.value = _value(b)
        if b.value >= -5.0:
            b.comment = True
            out.append(b)
    # a thread without one comment of prose is a stub ("Loading...", "User comments", a count): left out
    return out if any(b.value > 0 for b in out) else []
