"""Official evaluation metrics, one module per dataset (each defines ``EVALUATE`` for ``etc-evaluate``)."""
