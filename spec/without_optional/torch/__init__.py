# Stands in for the optional package 'torch' when this folder is first on
# PYTHONPATH (.ci/run does that for one pass of the suite): importing it fails as
# it does on a machine where the package is not installed, so the suite proves it
# passes there too.
raise ImportError("torch is hidden by spec/without_optional (the suite's run without optional packages)")
