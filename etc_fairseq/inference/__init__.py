"""Running fine-tuned checkpoints over prepared splits: the shared loop and one module per dataset (each defines ``PREDICT`` for ``etc-predict``)."""
