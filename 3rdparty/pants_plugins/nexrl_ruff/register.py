"""`ruff check` (lint) and `ruff format` (fmt, checked by lint) for Pants 2.17.

Pants 2.17's ruff backend calls `ruff <files>`, which current ruff rejects (the
`check` subcommand is required), and it has no formatter. This plugin reuses
Pants' `[ruff]` subsystem (version, resolve, config) and runs the two
subcommands. `./pants lint ::` runs both as checks; `./pants fmt ::` formats.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pants.backend.python.lint.ruff import skip_field, subsystem
from pants.backend.python.lint.ruff.subsystem import Ruff, RuffFieldSet
from pants.backend.python.util_rules import pex
from pants.backend.python.util_rules.pex import PexRequest, VenvPex, VenvPexProcess
from pants.core.goals.fmt import FmtResult, FmtTargetsRequest
from pants.core.goals.lint import LintResult, LintTargetsRequest
from pants.core.util_rules.config_files import ConfigFiles, ConfigFilesRequest
from pants.core.util_rules.partitions import PartitionerType
from pants.core.util_rules.source_files import SourceFiles, SourceFilesRequest
from pants.engine.fs import Digest, MergeDigests
from pants.engine.internals.native_engine import Snapshot
from pants.engine.process import FallibleProcessResult, ProcessResult
from pants.engine.rules import Get, MultiGet, collect_rules, rule
from pants.util.logging import LogLevel
from pants.util.meta import classproperty
from pants.util.strutil import pluralize


class RuffCheckRequest(LintTargetsRequest):
    field_set_type = RuffFieldSet
    tool_subsystem = Ruff
    partitioner_type = PartitionerType.DEFAULT_SINGLE_PARTITION

    @classproperty
    def tool_name(cls) -> str:
        return "ruff check"


class RuffFormatRequest(FmtTargetsRequest):
    field_set_type = RuffFieldSet
    tool_subsystem = Ruff
    partitioner_type = PartitionerType.DEFAULT_SINGLE_PARTITION

    @classproperty
    def tool_name(cls) -> str:
        return "ruff format"


@dataclass(frozen=True)
class _RuffProcess:
    subcommand: str
    snapshot: Snapshot


async def _ruff_process(request: _RuffProcess, ruff: Ruff) -> VenvPexProcess:
    ruff_pex, config_files = await MultiGet(
        Get(VenvPex, PexRequest, ruff.to_pex_request()),
        Get(ConfigFiles, ConfigFilesRequest, ruff.config_request(request.snapshot.dirs)),
    )
    digest = await Get(
        Digest, MergeDigests((request.snapshot.digest, config_files.snapshot.digest))
    )
    conf_args = [f"--config={ruff.config}"] if ruff.config else []
    return VenvPexProcess(
        ruff_pex,
        argv=(
            request.subcommand,
            "--force-exclude",
            *conf_args,
            *ruff.args,
            *request.snapshot.files,
        ),
        input_digest=digest,
        output_files=request.snapshot.files,
        description=f"Run ruff {request.subcommand} on {pluralize(len(request.snapshot.files), 'file')}.",
        level=LogLevel.DEBUG,
    )


@rule(desc="Lint with ruff check", level=LogLevel.DEBUG)
async def ruff_check(request: RuffCheckRequest.Batch[RuffFieldSet, Any], ruff: Ruff) -> LintResult:
    sources = await Get(SourceFiles, SourceFilesRequest(fs.source for fs in request.elements))
    process = await _ruff_process(_RuffProcess("check", sources.snapshot), ruff)
    result = await Get(FallibleProcessResult, VenvPexProcess, process)
    return LintResult.create(request, result, strip_chroot_path=True)


@rule(desc="Format with ruff format", level=LogLevel.DEBUG)
async def ruff_format(request: RuffFormatRequest.Batch, ruff: Ruff) -> FmtResult:
    process = await _ruff_process(_RuffProcess("format", request.snapshot), ruff)
    result = await Get(ProcessResult, VenvPexProcess, process)
    return await FmtResult.create(request, result, strip_chroot_path=True)


def rules():
    return (
        *collect_rules(),
        *RuffCheckRequest.rules(),
        *RuffFormatRequest.rules(),
        *pex.rules(),
        *skip_field.rules(),
        *subsystem.rules(),
    )
