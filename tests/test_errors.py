"""Errors that do not hide bugs (etc_fairseq/errors.py): a user error is one of the project's classes (also the
built-in a Python caller expects) and every command prints it as one line; any other exception -- a plain
ValueError, KeyError or OSError from a bug -- keeps its traceback. And the input checks behind the one-line
errors: JSON too deep or with a lone surrogate, stored values outside their range, model sizes beyond memory."""
import errno
import json
import pickle

import numpy as np
import pytest
import torch

from etc_fairseq import errors
from etc_fairseq.cli.evaluate import main as evaluate_main
from etc_fairseq.errors import (
    CheckpointLoadError,
    ConfigError,
    EtcError,
    InputFormatError,
    MissingFileError,
    OutputExistsError,
    OutputWriteError,
)


def test_each_class_is_also_the_builtin_a_caller_expects():
    missing = MissingFileError("x.txt: no such file")
    assert isinstance(missing, FileNotFoundError) and isinstance(missing, ValueError) and isinstance(missing, EtcError)
    assert str(missing) == "x.txt: no such file" and pickle.loads(pickle.dumps(missing)).args == missing.args
    exists = OutputExistsError("out: already exists")
    assert isinstance(exists, FileExistsError) and isinstance(exists, EtcError)
    written = OutputWriteError(errno.ENOSPC, "cannot write the output", "out/x.json")
    assert (written.errno, written.filename, isinstance(written, OSError)) == (errno.ENOSPC, "out/x.json", True)
    for cls in (ConfigError, CheckpointLoadError, InputFormatError):
        assert issubclass(cls, ValueError) and issubclass(cls, EtcError)


def test_which_errors_are_the_users():
    assert errors.is_user_error(ConfigError("--x: bad"))
    assert errors.is_user_error(OSError(errno.ENOSPC, "No space left on device", "/data/out.bin"))
    assert errors.is_user_error(PermissionError(errno.EACCES, "Permission denied", "/data/out.bin"))
    assert not errors.is_user_error(OSError(errno.ENOSPC, "No space left on device"))  # names no file
    assert not errors.is_user_error(FileNotFoundError(errno.ENOENT, "No such file or directory", "/tmp/x"))
    assert not errors.is_user_error(ValueError("a bug"))
    assert not errors.is_user_error(KeyError("a bug"))


@pytest.fixture
def evaluation(tmp_path):
    """A real etc-evaluate structured command line on two CONSTRUCTED records."""
    gold = tmp_path / "gold.jsonl"
    gold.write_text("".join(json.dumps({"id": f"r{i}", "words": ["a", "b"], "globals": [{"type": "CLS"}], "label": "x"})
                            + "\n" for i in range(2)))
    pred = tmp_path / "pred.json"
    pred.write_text(json.dumps({"r0": "x", "r1": "y"}))
    return ["structured", "--predictions", str(pred), "--gold", str(gold), "--label-level", "record"]


def test_a_bug_inside_a_command_keeps_its_traceback(evaluation, monkeypatch, capsys):
    """A plain ValueError (or an OSError of a missing internal file) raised inside the command escapes main, so
    the console script prints its traceback; before, any ValueError/OSError was printed as one tidy line."""
    from etc_fairseq.finetune.structured import metrics

    assert evaluate_main(evaluation) == 0
    assert json.loads(capsys.readouterr().out)["accuracy"] == 50.0
    for bug in (ValueError("planted bug"), KeyError("planted"), FileNotFoundError(errno.ENOENT, "No such file", "/tmp/x")):
        def planted(*args, bug=bug, **kwargs):
            raise bug
        monkeypatch.setattr(metrics, "evaluate", planted)
        with pytest.raises(type(bug)):
            evaluate_main(evaluation)
        assert "error:" not in capsys.readouterr().err


def test_a_user_error_or_a_full_disk_is_one_line(evaluation, monkeypatch, capsys):
    from etc_fairseq.finetune.structured import metrics

    for error, line in ((InputFormatError("gold.jsonl:3: field 'label': planted"), "gold.jsonl:3: field 'label': planted"),
                        (OSError(errno.ENOSPC, "No space left on device", "/out/m.json"),
                         "/out/m.json: No space left on device")):
        def planted(*args, error=error, **kwargs):
            raise error
        monkeypatch.setattr(metrics, "evaluate", planted)
        assert evaluate_main(evaluation) == 1
        assert capsys.readouterr().err == f"etc-evaluate structured: error: {line}\n"
    with pytest.raises(OSError, match="No space left"):  # --debug: the traceback instead
        evaluate_main(["--debug", *evaluation])


def test_fairseq_main_prints_a_user_error_as_one_line_and_a_bug_with_its_traceback(monkeypatch, capsys):
    """etc_fairseq/fairseq_fixes/one_line_errors.py: fairseq's call_main lets every exception escape (a
    traceback); the replacement exits with status 1 and one line for an EtcError, and leaves bugs alone."""
    from fairseq.dataclass.configs import FairseqConfig
    from fairseq.distributed import utils as distributed_utils
    from omegaconf import OmegaConf

    import etc_fairseq.register  # noqa: F401  (installs the fixes)
    from etc_fairseq.fairseq_fixes.patching import original

    cfg = OmegaConf.structured(FairseqConfig)
    monkeypatch.setattr("sys.argv", ["fairseq-validate"])

    def refuses(cfg):
        raise CheckpointLoadError("checkpoint m.pt: cfg.model.dropout=nan: expected a probability in [0, 1)")

    def bug(cfg):
        raise ValueError("planted bug")

    with pytest.raises(CheckpointLoadError):  # fairseq's own: the exception escapes, a traceback
        original("fairseq.distributed.utils", "call_main")(cfg, refuses)
    with pytest.raises(SystemExit) as e:
        distributed_utils.call_main(cfg, refuses)
    assert e.value.code == 1
    assert capsys.readouterr().err == ("fairseq-validate: error: checkpoint m.pt: cfg.model.dropout=nan: expected a "
                                       "probability in [0, 1)\n")
    with pytest.raises(ValueError, match="planted bug"):
        distributed_utils.call_main(cfg, bug)
    monkeypatch.setenv("ETC_FAIRSEQ_DEBUG", "1")
    with pytest.raises(CheckpointLoadError):
        distributed_utils.call_main(cfg, refuses)


# ---------------------------------------------------------------------------------------------------------
# the checks behind the one-line errors
# ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("text, message", [
    ("[" * 100_000 + "]" * 100_000, r"f\.json: JSON nested too deeply"),
    (json.dumps({"words": ["a", "b\udc80"]}), r"f\.json: field words\[1\]: holds \\udc80, half of a UTF-16 surrogate pair"),
    (json.dumps({"k\ud800": 1}), r"f\.json: field k\\ud800 \(its name\): holds \\ud800"),
    ('{"a": 1,\n "b": }', r"f\.json: not valid JSON \(Expecting value at line 2, column 7; a test file expected\)"),
])
def test_parse_json_refuses_in_one_line(text, message):
    from etc_fairseq.guards import parse_json

    with pytest.raises(InputFormatError, match=message):
        parse_json(text, "f.json", "a test file")


def test_parse_json_keeps_paired_surrogates_and_ordinary_text():
    from etc_fairseq.guards import parse_json

    assert parse_json(json.dumps({"w": ["\U0001F600", "caf\u00e9"]}), "f") == {"w": ["\U0001F600", "caf\u00e9"]}


def test_value_range_of_a_stored_split_names_the_item(tmp_path):
    from fairseq.data.indexed_dataset import MMapIndexedDatasetBuilder

    from etc_fairseq.data.indexed import check_value_range

    prefix = tmp_path / "valid.long_tokens"
    builder = MMapIndexedDatasetBuilder(f"{prefix}.bin", dtype=np.int32)
    for item in ([4, 5, 6], [7, 8], [9, 1200, 3]):
        builder.add_item(torch.tensor(item, dtype=torch.int32))
    builder.finalize(f"{prefix}.idx")
    check_value_range(prefix, 0, 1201, "ids")
    with pytest.raises(InputFormatError, match=r"valid\.long_tokens\.bin: item 2 \(position 1\) holds 1200; expected "
                                               r"ids of dict\.txt, in \[0, 1000\)"):
        check_value_range(prefix, 0, 1000, "ids of dict.txt")
    with pytest.raises(InputFormatError, match=r"item 0 \(position 0\) holds 4"):
        check_value_range(prefix, 5, 2000, "ids")


def test_a_model_beyond_memory_is_refused_before_anything_is_built(monkeypatch):
    from etc_fairseq.encoder import size
    from etc_fairseq.encoder.config import EtcEncoderConfig

    tiny = EtcEncoderConfig.preset("etc_tiny")
    # 2 layers of 4*64*64 + 2*64*256 parameters, and 100 x 64 embeddings
    assert size.minimum_parameter_count(tiny, vocab_size=100) == 2 * (4 * 64 * 64 + 2 * 64 * 256) + 100 * 64
    monkeypatch.setattr(size, "available_memory", lambda: 10_000_000)
    size.check_fits_in_memory(tiny, 100)
    with pytest.raises(ConfigError, match=r"the flags: encoder_layers=1000, encoder_embed_dim=64, .* at least "
                                          r"49,158,400 parameters \(0\.2 GB in float32\), more than the 0\.0 GB"):
        size.check_fits_in_memory(EtcEncoderConfig.preset("etc_tiny", encoder_layers=1000), 100, "the flags")
    monkeypatch.setattr(size, "available_memory", lambda: None)  # unknown: nothing refused
    size.check_fits_in_memory(EtcEncoderConfig.preset("etc_tiny", encoder_layers=1000), 100)


@pytest.mark.parametrize("field, value, message", [
    ("dropout", float("nan"), r"dropout=nan: expected a probability in \[0, 1\)"),
    ("attention_dropout", 1.5, r"attention_dropout=1\.5: expected a probability"),
    ("layer_norm_eps", 0.0, r"layer_norm_eps=0\.0: expected a positive finite number"),
    ("encoder_attention_heads", 0, r"encoder_attention_heads=0: expected an int >= 1"),
    ("local_radius", -1, r"local_radius=-1: expected an int >= 0"),
])
def test_model_values_that_cannot_work_are_refused_naming_the_field(field, value, message):
    from etc_fairseq.encoder.config import EtcEncoderConfig

    with pytest.raises(ConfigError, match=message):
        EtcEncoderConfig.preset("etc_tiny", **{field: value})


def test_a_core_model_directory_declaring_more_than_it_holds_or_nan_weights_is_refused(tmp_path):
    """EtcEncoder.from_pretrained: config.json's sizes against the tensors model.safetensors holds (read from its
    header, before anything is built: 100,000 layers are refused at once), and finite weights."""
    import math

    from safetensors.torch import load_file, save_file

    from etc_fairseq.encoder import EtcEncoder, EtcEncoderConfig

    EtcEncoder(EtcEncoderConfig.preset("etc_tiny"), 100, 1, 0).save_pretrained(tmp_path)
    assert EtcEncoder.from_pretrained(tmp_path).cfg.encoder_layers == 2
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps(dict(config, config=dict(config["config"], encoder_layers=100_000))))
    with pytest.raises(CheckpointLoadError, match=r"config\.json: encoder_layers=100000, .* declare at least "
                                                  r"4,915,206,400 parameters, but model\.safetensors holds 177,536"):
        EtcEncoder.from_pretrained(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps(config))
    state = load_file(str(tmp_path / "model.safetensors"))
    name = sorted(state)[0]
    state[name] = state[name].clone()
    state[name].view(-1)[0] = math.nan
    save_file(state, str(tmp_path / "model.safetensors"))
    with pytest.raises(CheckpointLoadError, match=rf"model\.safetensors: tensor '{name}' holds NaN or infinite"):
        EtcEncoder.from_pretrained(tmp_path)
