"""``python -m hvdlite --check-build``: how hvdlite was built (see hvdlite-run --check-build)."""
import sys


def main(argv) -> int:
    if argv in (["--check-build"], ["--version"]):
        from .runner.check_build import check_build, version
        print(check_build() if argv[0] == "--check-build" else f"hvdlite {version()}")
        return 0
    sys.stderr.write("usage: python -m hvdlite --check-build | --version\n"
                     "(to launch a job: hvdlite-run -np N python train.py)\n")
    return 2


sys.exit(main(sys.argv[1:]))
