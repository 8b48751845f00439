"""What the ETC fairseq tasks (``etc_pretraining`` and every structured fine-tuning task) share: a data
directory written by ``etc-prepare`` whose ``dict.txt``, plus ``<mask>``, is the vocabulary of source and
target; the directory of an epoch (fairseq's ``:``-separated ``data`` option, one directory per epoch); the
longest long input as ``max_positions``; and a built model held against the structure settings the data was
prepared with (:func:`etc_fairseq.data.prepared.check_model_fits_data`).

A task's config must have the fields ``data`` and ``max_long_len``.
"""
# No ``from __future__ import annotations``: fairseq reads the config field types at run time.
import logging

from fairseq import utils
from fairseq.data import Dictionary
from fairseq.tasks import FairseqTask

from etc_fairseq.data import prepared
from etc_fairseq.data.indexed import load_data_dictionary

logger = logging.getLogger(__name__)


class EtcDataTask(FairseqTask):
    """Base class; see the module docstring."""

    def __init__(self, cfg, dictionary: Dictionary):
        super().__init__(cfg)
        self.dictionary = dictionary
        self.mask_idx = dictionary.add_symbol("<mask>")

    @classmethod
    def data_description(cls) -> str:
        """The directory the task reads, for the error when ``data`` is empty."""
        raise NotImplementedError(f"{cls.__name__} must implement data_description")

    @classmethod
    def setup_task(cls, cfg, **kwargs):
        dictionary = load_data_dictionary(cfg.data, cls.data_description())
        logger.info(f"dictionary: {len(dictionary)} types (+ <mask>)")
        return cls(cfg, dictionary)

    def epoch_data_path(self, epoch: int) -> str:
        """The data directory of ``epoch`` (1-based): fairseq's ``:``-separated paths, taken in turn."""
        paths = utils.split_paths(self.cfg.data)
        return paths[(epoch - 1) % len(paths)]

    def build_model(self, cfg, from_checkpoint=False):
        """As fairseq's; then the model is held against what the data was prepared for
        (:meth:`check_prepared_model`)."""
        model = super().build_model(cfg, from_checkpoint)
        self.check_prepared_model(model)
        return model

    def check_prepared_model(self, model) -> None:
        """Refuse ``model`` (built) when its structure settings differ from those ``etc-prepare --arch`` (or
        ``--from-model``) recorded in ``prepare.json`` next to the data, naming the flags
        (:func:`etc_fairseq.data.prepared.check_model_fits_data`)."""
        prepared.check_model_fits_data(getattr(model, "cfg", None), self.cfg.data)

    def max_positions(self):
        return self.cfg.max_long_len

    @property
    def source_dictionary(self):
        return self.dictionary

    @property
    def target_dictionary(self):
        return self.dictionary
