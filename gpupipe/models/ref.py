"""`ModelRef`: how a config names a transformer model: a local folder (config, weights, tokenizer), checked to
exist and content-hashed into the stage's resume key like every `FileRef`; or, where no such folder exists, a
Hugging Face hub id (`org/name`), loaded where the machine reaches the hub (its content is not hashed: pin a
revision by downloading it to a folder)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, RootModel

from gpupipe.config_base import FileRef


class HubId(RootModel[str]):
    """A hub id such as `HuggingFaceFW/fineweb-edu-classifier` (dumps as the plain string)."""

    root: Annotated[str, Field(pattern=r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")]

    def __str__(self) -> str:
        return self.root


ModelRef = FileRef | HubId


def model_path(ref: str | HubId) -> str:
    return ref.root if isinstance(ref, HubId) else ref


__all__ = ["HubId", "ModelRef", "model_path"]
