"""Writing what autotune keeps: every file goes through :func:`atomic_write` (a
temporary file beside it, then a rename, so a reader or a crash never sees half a
file), and every JSON or YAML text through :func:`dump`."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable, Literal


def atomic_write(path: str | os.PathLike, content: str | Callable[[Path], None]) -> Path:
    """Writes ``content`` to ``path``: text, or a function that writes the temporary
    file it is given (``lambda tmp: torch.save(blob, tmp)``). The folder is created."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        if isinstance(content, str):
            tmp.write_text(content)
        else:
            content(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def dump(blob: Any, fmt: Literal["json", "yaml"]) -> str:
    """``blob`` as JSON (indented) or YAML (keys in their order), ending in a newline;
    values JSON cannot hold (paths, dates) as their ``str``."""
    text = json.dumps(blob, indent=2, default=str)
    if fmt == "json":
        return text + "\n"
    import yaml

    return yaml.safe_dump(json.loads(text), sort_keys=False)


def inductor_cache_dir(studies_dir: str | os.PathLike) -> Path:
    """Where compiled kernels persist between trials (and training runs) of a studies
    folder: ``STUDIES_DIR/.cache/inductor``."""
    return Path(studies_dir) / ".cache" / "inductor"
