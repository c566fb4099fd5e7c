"""gpupipe's own main-text extractor (`extract: {extractor: auto}`) and the per-page time bound.

`fast.py` is a single-pass block scorer on selectolax's Lexbor DOM; `timeout.py` stops a page that runs past
`extract_timeout` seconds. The Extract stage (gpupipe/stages/text/extract.py) wires them together; docs/design.md
("Main-text extraction") explains the choices and profiling/bench_extract.py measures them.
"""
