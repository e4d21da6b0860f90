"""Entry point: ``python -m backends.inference.embedded --model DIR ...``."""

from backends.inference.embedded.cli import main

if __name__ == "__main__":
    main()
