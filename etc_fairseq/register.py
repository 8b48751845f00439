"""Import this module to register everything etc-fairseq adds to fairseq (``user_dir`` does)."""

from etc_fairseq import models  # noqa: F401  (model "etc" + architectures)
