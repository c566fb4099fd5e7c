"""Data files shipped inside the gpupipe package (package data, not code).

- `lid.176.ftz`: fastText's language identification model (176 languages, the compressed 917 KiB version), the
  default model of the `langid` stage (`gpupipe.stages.filters.langid.default_model_path()`). Unmodified; licensed under
  CC BY-SA 3.0, not under gpupipe's Apache-2.0: see `NOTICE` beside it. Its size and SHA-256 are `LID_176_BYTES`
  and `LID_176_SHA256` (tests/test_install.py checks the file against them).
"""

from __future__ import annotations

import os

LID_176_FILE = "lid.176.ftz"
LID_176_BYTES = 938_013
LID_176_SHA256 = "8f3472cfe8738a7b6099e8e999c3cbfae0dcd15696aac7d7738a8039db603e83"


def path(name: str) -> str:
    """The file `name` of this folder as a plain filesystem path (gpupipe installs as a directory, never zipped)."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), name)
