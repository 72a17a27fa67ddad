"""Bundles on disk: the manifest, this machine's facts it records, and the checks before loading.

Imported by the runtime and the compile passes; imports neither (only yggc.errors, yggc.compat and torch).
"""
from .machine import dtype_name, file_sha256, isa_fingerprint, model_hashes, passes_hash
from .manifest import (
    ARTIFACTS,
    FORMAT_VERSION,
    MANIFEST,
    MODELS,
    BucketSpec,
    Manifest,
    OptLevel,
    environment,
    load_manifest,
    read_manifest_json,
    safe_relpath,
    weights_in_bundle,
)
from .validate import check_environment, check_files, validate_bundle

__all__ = ["ARTIFACTS", "FORMAT_VERSION", "MANIFEST", "MODELS", "BucketSpec", "Manifest", "OptLevel", "check_environment",
           "check_files", "dtype_name", "environment", "file_sha256", "isa_fingerprint", "load_manifest",
           "model_hashes", "passes_hash", "read_manifest_json", "safe_relpath", "validate_bundle", "weights_in_bundle"]
