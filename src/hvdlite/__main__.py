"""``python -m hvdlite --check-build``: how hvdlite was built and which MPI it finds (see
hvdlite-run --check-build); ``--settings``: every setting, as docs/settings.md's table."""
import sys


def main(argv) -> int:
    if argv in (["--check-build"], ["--version"]):
        from .runner.check_build import check_build, version
        print(check_build() if argv[0] == "--check-build" else f"hvdlite {version()}")
        return 0
    if argv == ["--settings"]:
        from .config import markdown_table
        print(markdown_table(), end="")
        return 0
    sys.stderr.write("usage: python -m hvdlite --check-build | --settings | --version\n"
                     "(to launch a job: hvdlite-run -np N python train.py)\n")
    return 2


sys.exit(main(sys.argv[1:]))
