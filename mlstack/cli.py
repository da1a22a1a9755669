"""`mlstack`: offline guidance and checks for blueprints.

Subcommands are registered by the module that owns them (`register(subparsers)`), so each layer keeps its
own command-line surface. Every user error is an `MlstackError`: printed as one line per problem on stderr,
exit status 2, no traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from mlstack.console import print_problems
from mlstack.errors import MlstackError

Handler = Callable[[argparse.Namespace], int]


def build_parser() -> argparse.ArgumentParser:
    from mlstack import blueprint_cli, precheck
    from mlstack.access import cli as access_cli
    from mlstack.catalog import cli as catalog_cli
    from mlstack.workloads import cli as workloads_cli

    parser = argparse.ArgumentParser(
        prog="mlstack",
        description="Scalable ML architectures on AWS: validate, plan and size blueprints offline.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    blueprint_cli.register(sub)
    access_cli.register(sub)
    catalog_cli.register(sub)
    precheck.register(sub)
    workloads_cli.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Handler = args.handler
    try:
        return handler(args)
    except MlstackError as err:
        print_problems(err)
        return 2
    except BrokenPipeError:  # `mlstack ... | head`
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
