"""Spark plumbing shared by the catch-up jobs: building a SparkSession for local mode or a
standalone cluster (drc.spark.session)."""
