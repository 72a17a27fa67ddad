"""The compile pipeline, one pass per file (installed as `yggc.passes`); the runtime never imports it."""
