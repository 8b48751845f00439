"""Training curves as a PNG from the event files of ``fairseq-train --tensorboard-logdir DIR``.

fairseq writes one event-file directory per split under DIR (``train_inner``: every ``--log-interval``
updates; ``train``: each epoch; ``valid``: each validation), each value tagged by its metric name
(``loss``, ``mlm_loss``, ``accuracy``, ...), stepped by the update number. This command reads those files
with tensorboardX's own protobuf classes (no TensorFlow, no tensorboard) and draws one panel per metric,
one line per split::

    python -m etc_fairseq.cli.curves runs/etc_pretraining/tb --out curves.png [--metrics loss mlm_acc]

Event files are TFRecord streams: per record an 8-byte length, its 4-byte CRC, the serialized ``Event``
and a 4-byte CRC (not checked here: a truncated last record of a running job is skipped).
"""
from __future__ import annotations

import argparse
import struct
import sys
from collections import defaultdict
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Tuple
from etc_fairseq.errors import ConfigError, MissingFileError

#: ``{split: {metric: [(update, value), ...]}}``
Curves = Dict[str, Dict[str, List[Tuple[int, float]]]]


def read_event_records(path: Path) -> Iterator[bytes]:
    """The serialized records of one event file, in order (a truncated last record is dropped)."""
    data = Path(path).read_bytes()
    pos = 0
    while pos + 12 <= len(data):
        (length,) = struct.unpack("<Q", data[pos : pos + 8])
        start, end = pos + 12, pos + 12 + length
        if end + 4 > len(data):
            break
        yield data[start:end]
        pos = end + 4


def read_curves(logdir: Path) -> Curves:
    """Every scalar in the event files under ``logdir``: the split is the file's directory relative to
    ``logdir`` (``train_inner``, ``valid``, ...). Raises FileNotFoundError naming ``logdir`` if it holds none."""
    from tensorboardX.proto.event_pb2 import Event

    logdir = Path(logdir)
    files = sorted(logdir.rglob("events.out.tfevents.*"))
    if not files:
        raise MissingFileError(f"{logdir}: no tensorboard event files (train with fairseq-train --tensorboard-logdir {logdir})")
    curves: Curves = defaultdict(lambda: defaultdict(list))
    for f in files:
        split = str(f.parent.relative_to(logdir)) if f.parent != logdir else "."
        for record in read_event_records(f):
            event = Event.FromString(record)
            for value in event.summary.value:
                if value.HasField("simple_value"):
                    curves[split][value.tag].append((int(event.step), float(value.simple_value)))
    return {s: {m: sorted(points) for m, points in ms.items()} for s, ms in curves.items()}


def plot_curves(curves: Curves, out: Path, metrics: Optional[Sequence[str]] = None, title: str = "") -> List[str]:
    """Draw ``curves`` into the PNG ``out`` (written atomically): one panel per metric (``metrics``, default
    every metric some split has), one line per split. Returns the metrics drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from etc_fairseq.prepare.atomic import atomic_file

    available = sorted({m for ms in curves.values() for m in ms})
    chosen = list(metrics) if metrics else [m for m in available if m not in ("wall", "wps", "ups", "wpb", "bsz",
                                                                           "gnorm", "clip", "lr", "train_wall", "gb_free")]
    missing = [m for m in chosen if m not in available]
    if missing or not chosen:
        raise ConfigError(f"no curve for {missing or 'any metric'}; the event files have {available}")
    cols = min(3, len(chosen))
    rows = (len(chosen) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.2 * rows), squeeze=False)
    for ax, metric in zip(axes.flat, chosen):
        for split in sorted(curves):
            points = curves[split].get(metric)
            if points:
                steps, values = zip(*points)
                ax.plot(steps, values, marker="o" if len(points) < 20 else None, markersize=3, label=split)
        ax.set_title(metric)
        ax.set_xlabel("update")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    for ax in list(axes.flat)[len(chosen):]:
        ax.axis("off")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    with atomic_file(Path(out), mode="wb") as f:
        fig.savefig(f, format="png", dpi=100)
    plt.close(fig)
    return chosen


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m etc_fairseq.cli.curves LOGDIR --out PNG``: 0 on success, 1 on a user error (one line)."""
    from etc_fairseq.cli.common import OneLineArgumentParser, report_user_errors, setup_logging

    p = OneLineArgumentParser(prog="python -m etc_fairseq.cli.curves", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("logdir", type=Path, help="the --tensorboard-logdir of fairseq-train")
    p.add_argument("--out", type=Path, required=True, help="PNG to write")
    p.add_argument("--metrics", nargs="+", default=None, help="metrics to draw (default: every loss/accuracy-like one)")
    p.add_argument("--title", default="", help="figure title")
    p.add_argument("--debug", action="store_true", help="show tracebacks for errors")
    args = p.parse_args(argv)
    setup_logging(False, False)

    def body() -> int:
        curves = read_curves(args.logdir)
        drawn = plot_curves(curves, args.out, args.metrics, args.title)
        print(f"wrote {args.out}: {', '.join(drawn)} for {', '.join(sorted(curves))}")
        return 0

    return report_user_errors(p.prog, args.debug, body)


if __name__ == "__main__":
    sys.exit(main())
