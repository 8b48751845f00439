"""The ``etc`` fairseq model (:mod:`.etc`), its layer (:mod:`.layer`) and architectures (:mod:`.architectures`)."""

from etc_fairseq.models.etc import ETC_FORMAT_VERSION, EtcConfig, EtcEncoder, EtcModel  # noqa: F401
from etc_fairseq.models import architectures  # noqa: F401  (registers etc_base, etc_large, ...)
from etc_fairseq.models.architectures import config_for_arch  # noqa: F401
