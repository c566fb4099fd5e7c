"""Page kinds other than articles (#33): product and shop pages, folded panels. Each fixture is a small page shaped
like the real ones these rules were chosen on (WCXB's dev split, choose half; docs/design.md "Page kinds")."""

from gpupipe.extract.fast import extract_text

SPECS = ("Seat: 20 in H x 24 in W x 19 in D. Base: 27 in W x 27 in D. Overall weight 58 lb. Frame material "
         "manufactured wood, upholstery vinyl, back fill foam, swivel and tilt lock included.")
ANSWER = ("Returns are accepted within thirty days of delivery for a full refund, provided the item is unused and "
          "in its original packaging; the return label is printed from your order page.")


def test_folded_panels_are_kept_and_dialogs_stay_hidden():
    """An accordion's folded panel (aria-hidden until clicked: a product's specifications, a FAQ's answers) and a
    React streamed segment (<div hidden id="S:1">, moved into place by script) hold the page's text; a hidden modal
    dialog does not."""
    html = f"""<html><body><nav><a href="/">Home</a> <a href="/chairs">Chairs</a></nav>
<main><h1>Executive Chair</h1><p>$659.99</p>
<div class="pdp-accordion"><button>Specifications</button>
<div class="pdp-accordion__panel" aria-hidden="true"><p>{SPECS}</p></div>
<button>Returns</button><div class="collapsible-content" style="display:none"><p>{ANSWER}</p></div></div>
<div class="modal fade" aria-hidden="true"><p>Sign up for our newsletter and get ten percent off your first order
today, delivered straight to your inbox every week.</p></div>
</main><template id="B:1"></template>
<div hidden id="S:1"><p>Customers praise its comfort and sturdy build; the vinyl is easy to clean and the seat height
adjusts smoothly through the whole range.</p></div></body></html>"""
    text = extract_text(html).text
    assert "manufactured wood" in text and "thirty days" in text and "easy to clean" in text
    assert "newsletter" not in text


DESC = ("You'll love the shimmering accent stone against the silver look of this belt buckle, with engraved and "
        "oxidized scrolls, a twisted rope border and a hook back with a swivel bar.")


def _card(name: str, description: str) -> str:
    import json
    return ('<script type="application/ld+json">' + json.dumps({"@context": "https://schema.org", "@type": "Product",
            "name": name, "description": description, "offers": {"@type": "Offer", "price": "335.00"}}) + "</script>")


def test_product_card_description_is_not_said_twice_and_its_html_is_text():
    """The card's description leads a shop page whose HTML gave less, but not where the HTML already has it (the
    lines split otherwise), and markup written into the card comes out as text."""
    page = (f"<html><head>{_card('Silver Belt Buckle', '<p>' + DESC + '</p> <p>See the <a href=/x>oval one</a>.</p>')}"
            f"</head><body><main><h1>Silver Belt Buckle</h1><p>$335.00</p><div class='desc'><p>{DESC}</p>"
            "<p>See the <a href=/x>oval one</a>.</p></div></main></body></html>")
    text = extract_text(page).text
    assert text.count("shimmering accent stone") == 1 and "<a" not in text
    script_only = f"<html><head>{_card('Silver Belt Buckle', '<p>' + DESC + '</p>')}</head><body><h1>Silver Belt " \
                  "Buckle</h1><p>$335.00</p></body></html>"
    text = extract_text(script_only).text
    assert text.startswith("You'll love the shimmering") and "<p>" not in text


def test_a_product_page_kept_whole_goes_to_trafilatura():
    """A product's page (a Product card named as its title) where fast's container is the whole page (the pitch,
    shipping notes and reviews with the description) goes to trafilatura under auto; a page whose Product cards are
    a list's items (named otherwise) does not."""
    import pandas as pd

    from gpupipe.stages.base import RunContext
    from gpupipe.stages.text.extract import Extract, ExtractConfig

    body = (f"<h1>Silver Belt Buckle</h1><div class='col'><p>{DESC}</p>"
            "<p>Free shipping on orders over seventy-five dollars, and free returns within thirty days of delivery "
            "to any of our stores.</p>"
            "<p>What makes our sales team great? Hand selected from across the globe, each brings a wealth of "
            "experience to provide you with unparalleled service.</p></div>")
    product = f"<html><head>{_card('Silver Belt Buckle', DESC)}</head><body>{body}</body></html>"
    listing = f"<html><head>{_card('Gold Buckle', DESC)}</head><body>{body}</body></html>"
    r = extract_text(product)
    assert r.product and r.prose_kept == 0 < r.prose
    assert not extract_text(listing).product and extract_text(listing).prose_kept > 0
    stage = Extract(ExtractConfig(extractor="auto"), RunContext())
    stage.setup()
    df = pd.DataFrame({"id": ["p", "l"], "doc_index": [0, 1], "url": [None, None], "html": [product, listing]})
    _, _, stats = stage.run_partition(df)
    assert stats.extra["extract_fallback"] == 1


def test_customer_reviews_are_left_out_of_a_product_page_only():
    """On a product's page the customer reviews (class "review") are not the product's text; elsewhere the same
    markup is left to the other rules."""
    reviews = "".join(f"<div class='review'><p>Review {i}: I absolutely love this buckle, it arrived quickly and looks "
                      "even better in person than in the photos, would buy again.</p></div>" for i in range(3))
    body = (f"<main><h1>Silver Belt Buckle</h1><div class='desc'><p>{DESC}</p><p>{SPECS}</p><p>{ANSWER}</p>"
            f"<p>{DESC.replace('love', 'admire')}</p></div>"
            f"<div class='feedback'>{reviews}</div></main>")
    product = f"<html><head>{_card('Silver Belt Buckle', DESC)}</head><body>{body}</body></html>"
    text = extract_text(product).text
    assert "shimmering accent stone" in text and "manufactured wood" in text and "absolutely love" not in text
    assert "absolutely love" in extract_text(f"<html><body>{body}</body></html>").text


FEATURE = ("The feeder's camera wakes when a bird lands, frames it and sends you a photo with the species named, so "
           "you learn who visits your garden while you are away at work.")
OG_PRODUCT = '<meta property="og:type" content="product">'


def _page(head: str, body: str) -> str:
    return f"<html><head>{head}</head><body>{body}</body></html>"


def test_a_product_page_keeps_its_hidden_tab_panels():
    """A shop's specifications tab (hidden until clicked: class "tab-pane", role="tabpanel") is the product's text on
    a product's page; elsewhere a hidden tab panel stays hidden (a forum's notification-help dialog is made of them)."""
    body = (f"<main><h1>Titan Z Graphics Card</h1><p>{DESC}</p><p>{DESC.replace('love', 'like')}</p>"
            f"<div class='tab-pane' style='display:none'><p>{SPECS}</p></div>"
            f"<div role='tabpanel' hidden><p>{ANSWER}</p></div>"
            f"<div class='modal tab-pane' style='display:none'><p>{FEATURE}</p></div></main>")
    text = extract_text(_page(OG_PRODUCT, body)).text
    assert "manufactured wood" in text and "thirty days" in text and "feeder's camera" not in text
    text = extract_text(_page("", body)).text
    assert "shimmering accent stone" in text and "manufactured wood" not in text and "thirty days" not in text


def test_a_product_pages_slider_is_its_own_text():
    """On a product's page a slider or carousel shows the product (its feature slides, testimonials): kept; on
    another page it is boilerplate (a slideshow of other stories)."""
    slides = "".join(f"<div class='slide'><p>{FEATURE.replace('photo', f'photo {i}')}</p></div>" for i in range(2))
    body = (f"<main><h1>Smart Bird Feeder</h1><p>{DESC}</p><p>{SPECS}</p><p>{ANSWER}</p>"
            f"<p>{DESC.replace('love', 'admire')}</p>"
            f"<div class='feature-slider'>{slides}</div></main>")
    assert "feeder's camera" in extract_text(_page(OG_PRODUCT, body)).text
    assert "feeder's camera" not in extract_text(_page("", body)).text


def test_a_product_page_says_each_line_once():
    """A product's page repeats its parts per screen size and per variant (a spec list for each platform); its text
    says each line once, auto's fallback text included. Other pages keep their repeats."""
    from gpupipe.extract.fast import said_once
    from gpupipe.stages.text.extract import ExtractConfig, Fallback, _Auto

    specs = "<ul><li>Processor: 2.0 GHz</li><li>Memory: 4 GB RAM</li><li>Storage: 200 MB available</li></ul>"
    body = (f"<main><h1>Terraria</h1><p>{DESC}</p><p>{SPECS}</p><h2>Windows</h2>{specs}<h2>macOS</h2>{specs}"
            "</main>")
    text = extract_text(_page(OG_PRODUCT, body)).text
    assert text.count("Memory: 4 GB RAM") == 1 and "macOS" in text
    assert extract_text(_page("", body)).text.count("Memory: 4 GB RAM") == 2
    assert said_once("a\nb\n a\nc\nb") == "a\nb\nc"
    # a line of machine tokens (a shop's obfuscated "Sponsored" label: ids mixing letters and digits) is no text;
    # a spec line with model numbers is
    ids = " ".join(f"S{i}f2f260c3-bf1f-466a-b856-6f03{i}758a086p" for i in range(5))
    spec = "Memory: 16GB DDR5 6400MHz CL32 1.40V, XMP 3.0, 4x16GB kit, RGB, 288-pin DIMM, PC5-51200, heatspreader 2x"
    assert said_once(f"Similar items\n{ids}\n{spec}") == f"Similar items\n{spec}"
    # a product's page kept whole goes to trafilatura (PRODUCT_WHOLE): its text is said once too, another's is not
    whole = f"<h1>Terraria</h1><div class='col'><p>{DESC}</p><p>{SPECS}</p><p>{ANSWER}</p></div>"
    auto = _Auto(ExtractConfig())
    auto._slow = lambda html, url: "Price: $9.99\nA sandbox game.\nPrice: $9.99"
    out = auto(_page(OG_PRODUCT, whole), None)
    assert isinstance(out, Fallback) and out == "Price: $9.99\nA sandbox game."


def test_a_large_shop_page_is_extracted_as_trafilatura_would():
    """A shop page of several MB (mostly inline scripts and data) is extracted: the stage's size cap is trafilatura's
    own (20 MB), not 5 MB; a page over it is skipped as html_too_large."""
    import pandas as pd

    from gpupipe.stages.base import RunContext
    from gpupipe.stages.text.extract import Extract, ExtractConfig

    data = "<script>window.__DATA__ = \"" + "x" * 6_000_000 + "\";</script>"
    page = _page(OG_PRODUCT + data, f"<main><h1>Modern Leather Case</h1><p>{DESC}</p><p>{SPECS}</p></main>")
    huge = page.replace("x" * 6_000_000, "x" * 21_000_000)
    stage = Extract(ExtractConfig(extractor="fast"), RunContext())
    stage.setup()
    df = pd.DataFrame({"id": ["big", "huge"], "doc_index": [0, 1], "url": [None, None], "html": [page, huge]})
    kept, rejects, _ = stage.run_partition(df)
    assert list(kept["id"]) == ["big"] and "shimmering accent stone" in kept["text"].iloc[0]
    assert list(rejects["reason"]) == ["html_too_large"]
