"""The command-line arguments sphinx-gallery gives each example: ``--quick`` (each
example's reduced size, its ``QUICK``) when ``STOCHMIX_DOCS_QUICK`` is set, as in CI."""


class ExampleArgv:
    """``reset_argv`` of sphinx-gallery: a class with a stable ``repr``, so that its
    configuration can be cached."""

    def __init__(self, quick: bool):
        self.quick = quick

    def __repr__(self) -> str:
        return f"ExampleArgv(quick={self.quick})"

    def __call__(self, gallery_conf, script_vars) -> list[str]:
        return ["--quick"] if self.quick else []
