"""`mtonnx batch`: its arguments and its entry point (cli.py adds both; nothing heavy is imported here).

Defaults come from the params file's `scale` section (`--params`, else the schema's defaults); flags override.
"""

from __future__ import annotations

import argparse
import sys

from mtonnx.foundation.arguments import add_model_source, in_range
from mtonnx.runtime.layouts import PUBLIC
from mtonnx.scale.jobs import ENGINES

_positive = in_range(int, 1)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add `mtonnx batch`'s arguments to `parser`."""
    add_model_source(parser, "export or variant directory (must exist on every node)")
    parser.add_argument(
        "--input", required=True, nargs="+", help="text/JSONL/Parquet files, directories or globs (quote globs)"
    )
    parser.add_argument("--output", required=True, help="directory of the output shards, one per input file")
    parser.add_argument("--engine", choices=ENGINES, help="local: one process, no Ray (default); ray: Ray Data")
    parser.add_argument("--address", help="Ray cluster address (implies --engine ray; default $RAY_ADDRESS or local)")
    parser.add_argument("--workers", type=_positive, help="Ray actors, one Translator each (default: params)")
    parser.add_argument("--threads-per-worker", type=_positive, help="CPUs and ONNX Runtime threads per worker")
    parser.add_argument("--batch-size", type=_positive, help="sentences per model call, length-sorted in a chunk")
    parser.add_argument("--format", choices=("parquet", "jsonl"), default="parquet", help="output format")
    parser.add_argument("--input-format", choices=("auto", "text", "jsonl", "parquet"), default="auto")
    parser.add_argument("--params", help="params YAML whose scale section (and model.source_prefix) sets defaults")
    parser.add_argument("--source-prefix", help="e.g. '>>cmn_Hans<<' for opus-mt-en-zh")
    parser.add_argument("--beams", type=_positive, help="beam size (default: the model's generation_config)")
    parser.add_argument("--max-new-tokens", type=_positive, help="longest translation in tokens")
    parser.add_argument("--decoder", default="auto", choices=("auto", *PUBLIC))
    parser.add_argument(
        "--overwrite", action="store_true", help="replace files in --output that mtonnx batch did not write"
    )


def settings(args: argparse.Namespace) -> dict:
    """The job's settings: the params file's scale section (or the schema defaults), overridden by the flags."""
    from mtonnx import params

    if args.params:
        loaded = params.load(args.params)
        scale, prefix = loaded["scale"], loaded["model"]["source_prefix"]
    else:
        from mtonnx.runtime.translator import deployed_prefix

        scale = {key: spec.default for key, spec in params.SCHEMA["scale"].items()}
        prefix = deployed_prefix(args.model_dir)
    flags = {
        "engine": args.engine or ("ray" if args.address else None),
        "workers": args.workers,
        "threads_per_worker": args.threads_per_worker,
        "batch_size": args.batch_size,
    }
    chosen = {key: scale[key] if value is None else value for key, value in flags.items()}
    chosen["source_prefix"] = prefix if args.source_prefix is None else args.source_prefix
    return chosen


def main(args: argparse.Namespace) -> int:
    """Run `mtonnx batch`; 0 when every row of every input translated, 1 when some row has an error (its shard still
    holds it, the reason in its error column) or the job failed while running, 2 when the job cannot start (one line
    `mtonnx: error: ...`: a bad setting, another job on the output directory, a file there it did not write)."""
    from mtonnx.params import ParamsError
    from mtonnx.runtime.translator import ModelDirError, model_dir_of, verify_dir
    from mtonnx.scale.inputs import ScaleError
    from mtonnx.scale.jobs import summary_line, translate_files

    try:
        args.model_dir = str(model_dir_of(args.model_dir, args.run))
        verify_dir(args.model_dir)  # before any file of it is read (deploy.json for the prefix), so not again below
        chosen = settings(args)
        options = {k: v for k, v in (("num_beams", args.beams), ("max_new_tokens", args.max_new_tokens)) if v}
        result = translate_files(
            args.model_dir,
            args.input,
            args.output,
            fmt=args.format,
            input_format=args.input_format,
            decoder=args.decoder,
            options=options,
            address=args.address,
            overwrite=args.overwrite,
            verify=False,
            **chosen,
        )
    except (ScaleError, ParamsError, ModelDirError) as err:
        print(f"mtonnx: error: {err}", file=sys.stderr)
        return 2
    except Exception as err:  # a failed job (Ray's errors included) is one line and exit 1
        lines = [line.strip() for line in str(err).splitlines() if line.strip()]
        cause = lines[-1] if lines else "no message"  # Ray's errors end with the worker's own exception
        print(f"mtonnx: error: the batch job failed: {type(err).__name__}: {cause}", file=sys.stderr)
        return 1
    print(summary_line(result), file=sys.stderr)
    failed = result["errors"] + result["skipped_errors"]
    if failed:
        print(
            f"mtonnx: error: rows with an error: {failed} (their shards in {args.output} hold them, the reason in the "
            "error column)",
            file=sys.stderr,
        )
        return 1
    return 0
