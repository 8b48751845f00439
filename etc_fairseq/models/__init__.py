"""The fairseq adapter: the ``etc`` model (:mod:`.etc`), wrapping the core :mod:`etc_fairseq.encoder`,
and its architectures (:mod:`.architectures`)."""

from etc_fairseq.models.etc import ETC_FORMAT_VERSION, EtcConfig, EtcFairseqEncoder, EtcModel  # noqa: F401
from etc_fairseq.models import architectures  # noqa: F401  (registers etc_base, etc_large, ...)
from etc_fairseq.models.architectures import config_for_arch  # noqa: F401
