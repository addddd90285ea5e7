"""Hub models, fetched once into RLBENCH_HOME and used from there as local folders.

A task of the real tier names its base by hub id, `owner/name` or `owner/name@REVISION` (a commit
pins the bytes). The harness fetches it once, outside any sandbox, with huggingface_hub's own
`snapshot_download` into `models_root()/hub` (the hub's cache layout), and from then on every
reader (the workspace copy, the baseline, scoring, a rerun) loads that folder: a sandbox never
reaches the hub, and the result names the base by the weights hash of the folder it loaded, as
for a zoo model. On a machine without the hub, the same layout can be filled by hand
(`huggingface-cli download ID --revision REV --cache-dir $RLBENCH_HOME/public/models/hub` elsewhere, then
copied): the cache is tried first, so a filled cache needs no network at all.
"""

from __future__ import annotations

import re
from pathlib import Path

from rlbench.config.core import ConfigError
from rlbench.paths import models_root

HUB_ID = re.compile(r"^(?P<repo>[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*)(?:@(?P<revision>[\w.-]+))?$")
# the files a causal LM needs; a repo's other files (other formats, images, onnx) are not fetched
PATTERNS = ["*.json", "*.safetensors", "*.model", "*.txt", "*.jinja", "*.py", "*.tiktoken"]


def parse_hub_id(ref: str) -> tuple[str, str | None] | None:
    """(repo, revision) of `owner/name[@revision]`, or None when `ref` is not a hub id."""
    if ref.startswith((".", "/", "~")):
        return None
    m = HUB_ID.match(ref)
    return (m.group("repo"), m.group("revision")) if m else None


def hub_cache() -> Path:
    return models_root() / "hub"


def fetch(repo: str, revision: str | None = None) -> Path:
    """The local folder of `repo` at `revision` (default: the repo's main): from the cache when it
    is there, else downloaded once. An error says where to put it when the hub is unreachable."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    cache = hub_cache()
    try:
        return Path(snapshot_download(repo, revision=revision, cache_dir=str(cache), local_files_only=True,
                                      allow_patterns=PATTERNS))
    except LocalEntryNotFoundError:
        pass  # not in the cache yet: fetched once, below
    try:
        folder = Path(snapshot_download(repo, revision=revision, cache_dir=str(cache), allow_patterns=PATTERNS))
    except Exception as exc:  # noqa: BLE001 - network, auth, missing repo: all end the same way here
        at = f" at revision {revision}" if revision else ""
        raise ConfigError(f"model '{repo}'{at}: not in the cache {cache} and not fetched ({type(exc).__name__}: "
                          f"{exc}). Where the hub is unreachable, download it elsewhere with `huggingface-cli "
                          f"download {repo}{' --revision ' + revision if revision else ''} --cache-dir DIR` and copy "
                          f"DIR's contents to {cache}") from None
    if not (folder / "config.json").is_file():
        raise ConfigError(f"model '{repo}' fetched to {folder} has no config.json: not a HF causal LM")
    return folder
