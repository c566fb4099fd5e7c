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
