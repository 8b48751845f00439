"""The loop every ``etc-predict`` subcommand shares: load a fine-tuned checkpoint (fairseq's own loader,
torch's safe unpickling), load a prepared split through the checkpoint's task, run the model batch by
batch with progress logging, and hand each batch and the model's outputs to the dataset's decoder.
"""
from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, Optional, Tuple

import torch

from etc_fairseq.errors import ConfigError, MissingFileError
from etc_fairseq.guards import positive_int

logger = logging.getLogger(__name__)


def device_name(text: str) -> str:
    """argparse type of ``--device``: ``cpu``, ``cuda`` or ``cuda:N`` on a machine that has that device."""
    kind, _, index = text.partition(":")
    if kind == "cpu" and not index:
        return text
    if kind != "cuda" or (index and not index.isdigit()):
        raise argparse.ArgumentTypeError(f"expected cpu, cuda or cuda:N, got {text!r}")
    if not torch.cuda.is_available():
        raise argparse.ArgumentTypeError(f"{text}: CUDA is not available on this machine (use --device cpu)")
    if index and int(index) >= torch.cuda.device_count():
        raise argparse.ArgumentTypeError(f"{text}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    return text


def add_predict_arguments(p: argparse.ArgumentParser) -> None:
    """Options shared by every ``etc-predict`` subcommand."""
    p.add_argument("--path", type=Path, required=True, help="fine-tuned checkpoint (fairseq-train's checkpoint_best.pt)")
    p.add_argument("--data", type=Path, required=True, help="the directory written by etc-prepare for this task")
    p.add_argument("--split", default="valid", help="prepared split to predict (default: valid)")
    p.add_argument("--output", type=Path, required=True, help="prediction file to write (official format)")
    p.add_argument("--batch-size", type=positive_int, default=8, help="examples per batch (default 8)")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    p.add_argument("--device", type=device_name, default=device,
                   help=f"cpu, cuda or cuda:N (default: cuda when a GPU is visible, else cpu; here {device})")
    p.add_argument(
        "--model-overrides", default="{}", help='python dict of model config overrides, e.g. "{\'local_radius\': 84}"'
    )


def load_checkpoint(path: Path, data: Path, overrides: Optional[Dict[str, Any]] = None, device: str = "cpu"):
    """Load ``path`` with its task pointed at ``data``.

    Returns:
        (model in eval mode on ``device``, task, cfg).
    Raises:
        FileNotFoundError: no such checkpoint (named).
    """
    import etc_fairseq.register  # noqa: F401  (our model/tasks/criterions)
    from fairseq import checkpoint_utils

    from etc_fairseq.data.indexed import check_dictionary_file, dictionary_path
    from etc_fairseq.guards import check_input_file

    check_input_file(Path(path), "a checkpoint file (--path)")
    if not Path(data).is_dir():
        raise MissingFileError(f"{data}: no such prepared directory (--data; run etc-prepare first)")
    check_dictionary_file(dictionary_path(data))  # the task reads it after the model is loaded
    arg_overrides = dict(overrides or {})
    arg_overrides["data"] = str(data)  # the task takes up what DATA/prepare.json records (data/prepared.py)
    models, cfg, task = checkpoint_utils.load_model_ensemble_and_task([str(path)], arg_overrides=arg_overrides)
    model = models[0].to(device).eval()
    return model, task, cfg


def iterate_outputs(
    model, task, split: str, batch_size: int, device: str = "cpu", log_every: int = 50
) -> Iterator[Tuple[Dict[str, Any], torch.Tensor, Dict[str, Any]]]:
    """Run the model over a prepared split in dataset order.

    Yields:
        (sample, long_features float [B, L, D], extra) per batch, where ``extra["global_features"]`` is
        float [B, G, D]; ``sample`` is the collated batch (on ``device``), ``sample["id"]`` int64 [B] the
        example indices (rows of the split's side jsonl).
    """
    from fairseq import utils

    from etc_fairseq.progress import progress

    task.load_dataset(split, predicting=True)
    ds = task.dataset(split)
    n = len(ds)
    t0 = time.monotonic()
    done = 0
    with torch.no_grad():
        starts = range(0, n, batch_size)
        for start in progress(starts, desc=f"predicting {split}", unit="batch"):
            sample = ds.collater([ds[i] for i in range(start, min(start + batch_size, n))])
            if device != "cpu":
                sample = utils.move_to_cuda(sample, device=torch.device(device))
            features, extra = task.forward_features(model, sample)
            yield sample, features, extra
            done += len(sample["id"])
            if done // log_every != (done - len(sample["id"])) // log_every or done == n:
                logger.info(f"{split}: {done}/{n} examples ({time.monotonic() - t0:.1f} s)")


def write_predictions(args: argparse.Namespace, predict: Callable[..., Dict[str, Any]], indent: Optional[int] = 0) -> int:
    """The ``_run`` of an ``etc-predict`` subcommand whose predictions are one JSON object ``{id: prediction}``.

    Loads ``args.path`` on ``args.data``, reads the split's side records, calls
    ``predict(model, task, split, side, batch_size, device)`` and writes its result to ``args.output``
    atomically (``indent=None``: one line, for long per-example lists). Returns the exit status 0.
    """
    from etc_fairseq.data.structured import read_side
    from etc_fairseq.prepare.atomic import atomic_file

    model, task, _ = load_checkpoint(args.path, args.data, parse_overrides(args.model_overrides), args.device)
    side = read_side(args.data, args.split)
    preds = predict(model, task, args.split, side, args.batch_size, args.device)
    with atomic_file(args.output) as f:
        json.dump(preds, f, ensure_ascii=False, indent=indent)
        f.write("\n")
    print(f"wrote {len(preds)} predictions to {args.output}")
    return 0


def parse_overrides(text: str) -> Dict[str, Any]:
    """``--model-overrides`` as a dict (a Python literal), with a clear error."""
    import ast

    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError) as e:
        raise ConfigError(f"--model-overrides must be a Python dict literal, got {text!r} ({e})") from None
    if not isinstance(value, dict):
        raise ConfigError(f"--model-overrides must be a dict, got {type(value).__name__}")
    return value
