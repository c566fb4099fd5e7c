"""Settings of the `substring_dedup` stage."""

from __future__ import annotations

from pydantic import Field

from gpupipe.config_base import Strict

ANCHOR_K_MAX = 64          # winnowing gram length (bytes) for the cross-group pass, at most min_length / 2
SNAP_REACH_BYTES = 64      # how far a cut point may move inward to reach whitespace
REASON = "substring_duplicate_too_short"


class SubstringDedupConfig(Strict):
    min_length: int = Field(200, ge=16, description="shortest repeated span removed, in UTF-8 bytes")
    within_document: bool = False        # also cut a window's later repeats inside the document that has it first
    min_remaining_chars: int = Field(50, ge=0, description="a cut document keeping fewer non-blank chars is dropped")
    snap_to_whitespace: bool = False     # move cut points inward to whitespace (keeps words whole where possible)
    group_bytes: int = Field(256 * 2**20, ge=1, description="text bytes per suffix-array group (memory ~10x)")
