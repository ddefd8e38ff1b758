"""The ``eval``, ``score`` and ``sweep`` subcommands of ``simulst`` (registered by :func:`register`).

::

    simulst eval ../shared/data/fleurs-en-dev.tsv --output runs/la2 --policy la-2 --chunk-ms 1000
    simulst eval --source wavs.txt --target refs.txt --output runs/la2          # SimulEval's list files
    simulst score runs/la2 [--json]                                             # ours or SimulEval's log
    simulst score runs/talks --long-form --references refs.txt --segmentation talks.yaml  # one instance per talk
    simulst sweep ../shared/data/jfk.tsv ../shared/data/fleurs-en-dev.tsv --output bench/results/sweep \\
        --policies la-2 hold-6 offline --chunks 500 1000 --jobs 2
    simulst sweep ... --cluster ray [--ray-address HOST:6379]                    # on a Ray cluster (docs/cluster.md)

Bad inputs raise :class:`~simulst.errors.SimulstError` subclasses; the CLI prints them and exits with 2.
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from simulst.cli.cascade import add_cascade_arguments, cascade_from_args
from simulst.cli.options import (
    add_stream_arguments,
    given_options,
    latency_preset,
    model_options_from_args,
    stream_options_from_args,
)
from simulst.config import SearchOptions
from simulst.errors import OptionError
from simulst.evaluation.latency import DEFAULT_LATENCY_METRICS, LATENCY_METRICS, LATENCY_UNITS
from simulst.evaluation.longform import (
    LONGFORM_METRICS,
    RESEGMENTERS,
    LongformOptions,
    score_longform_log,
    write_longform_scores,
)
from simulst.evaluation.manifest import TestItem, TestSetError, read_manifest, read_simuleval_lists
from simulst.evaluation.plots import plot_sweep
from simulst.evaluation.quality import DEFAULT_SACREBLEU_TOKENIZER, QUALITY_METRICS
from simulst.evaluation.scoring import ScoreOptions, ScoreReport, format_table, score_log, write_scores

if TYPE_CHECKING:  # (the runner, the sweep and the cluster load torch: each command imports them when it runs)
    from simulst.evaluation.cluster import ClusterOptions
    from simulst.evaluation.runner import EvalOptions
    from simulst.streaming.engine import Engine


def register(subparsers: Any) -> None:
    """Add ``eval``, ``score`` and ``sweep`` to the ``simulst`` argument parser's subparsers."""
    text = "run a test set through simulst and write a SimulEval-compatible output folder"
    p = _add_run_parser(subparsers, "eval", text, multiple=False,
                        output="output folder (instances.log, scores.tsv, ...)")
    _add_eval_arguments(p)
    p.add_argument("--overwrite", action="store_true", help="start afresh instead of resuming the folder's log")
    p.add_argument("--json", action="store_true", help="print the scores as one JSON object")
    p.set_defaults(func=eval_command)

    text = "score an instances.log (written by simulst or SimulEval) and print the metrics"
    p = subparsers.add_parser("score", help=text, description=text)
    p.add_argument("logdir", help="output folder holding instances.log (or the log file itself)")
    _add_scoring_arguments(p, long_form=True)
    p.add_argument("--computation-aware", action=argparse.BooleanOptionalAction, default=None,
                   help="add the NAME_CA metrics (default: when the log has elapsed times)")
    p.add_argument("--no-use-ref-len", action="store_true",
                   help="|Y*| := output length instead of the reference length (as SimulEval's flag)")
    p.add_argument("--json", action="store_true", help="print one JSON object keyed by SimulEval's metric names")
    p.add_argument("--write", action="store_true", help="also (re)write scores.tsv, scores.json, metrics.tsv "
                                                        "(--long-form: scores.longform.tsv/.json, "
                                                        "metrics.longform.tsv, instances.resegmented.jsonl)")
    _add_longform_arguments(p)
    p.set_defaults(func=score_command)

    text = "run a grid of configurations over a test set; write a table (CSV, Markdown) and quality-latency plots"
    p = _add_run_parser(subparsers, "sweep", text, multiple=True,
                        output="sweep folder (runs/, sweep.csv, sweep.md, *.png)")
    p.add_argument("--policies", nargs="+", default=None, metavar="POLICY",
                   help="policies to sweep, e.g. la-2 la-3 hold-6 sp-2 offline (default: --policy)")
    p.add_argument("--chunks", nargs="+", type=float, default=None, metavar="MS",
                   help="chunk sizes in ms (default: --chunk-ms)")
    p.add_argument("--searches", nargs="+", default=None, metavar="SEARCH",
                   help="searches to sweep: greedy beam (default: --search)")
    p.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2",
                   help="another axis over a stream option, e.g. search.beam=4,8 or initial_wait_ms=0,2000 "
                        "(repeatable)")
    p.add_argument("--jobs", "-j", type=int, default=1, help="configurations run in parallel processes (default 1)")
    p.add_argument("--plot-quality", default=None, choices=QUALITY_METRICS,
                   help="quality axis of the plots (default: WER_whisper for --task transcribe, else BLEU)")
    _add_eval_arguments(p)
    p.set_defaults(func=sweep_command)


# ------------------------------------------------------------------------------------------------- arguments


def _add_run_parser(subparsers: Any, name: str, text: str, multiple: bool, output: str) -> argparse.ArgumentParser:
    """A subcommand that streams a test set (``eval``, ``sweep``): the test set, the output folder, the stream,
    task and cascade options."""
    p: argparse.ArgumentParser = subparsers.add_parser(name, help=text, description=text)
    _add_test_set_arguments(p, multiple=multiple)
    p.add_argument("--output", "-o", required=True, help=output)
    add_stream_arguments(p)
    _add_task_argument(p)
    add_cascade_arguments(p, speech=False)
    _add_cluster_arguments(p)
    return p


def _add_cluster_arguments(p: argparse.ArgumentParser) -> None:
    group = p.add_argument_group("cluster (simulst[ray]: one task per configuration and utterance)")
    group.add_argument("--cluster", choices=("local", "ray"), default="local",
                       help="local (default): this process (sweep: --jobs processes); ray: tasks on a Ray cluster, "
                            "whose workers each load the model once; outputs land here as a local run's")
    group.add_argument("--ray-address", default=None, metavar="ADDR",
                       help="the Ray cluster (host:port, ray://host:10001, auto); default $RAY_ADDRESS, else a "
                            "local cluster started for this run")
    group.add_argument("--ray-cpus-per-task", type=float, default=1.0, metavar="N",
                       help="CPUs each task reserves, its worker's torch threads (default 1)")
    group.add_argument("--ray-retries", type=int, default=3, metavar="N",
                       help="reruns of a task whose worker died (default 3); a task that still fails is reported")


def _add_test_set_arguments(p: argparse.ArgumentParser, multiple: bool) -> None:
    group = p.add_argument_group("test set (a TSV manifest, or SimulEval's --source/--target list files)")
    if multiple:
        group.add_argument("manifest", nargs="*", help="TSV manifest(s): id, audio, duration_s, transcript/reference")
    else:
        group.add_argument("manifest", nargs="?", help="TSV manifest: id, audio, duration_s, transcript/reference")
    group.add_argument("--source", help="SimulEval source list: one wav path per line")
    group.add_argument("--target", help="SimulEval target list: one reference per line")
    group.add_argument("--tgt-lang", help="target language code, or a file with one code per line")
    group.add_argument("--reference-column", help="manifest column with the reference (default: reference, "
                                                  "translation, tgt_text, target, else transcript)")
    group.add_argument("--references", help="TSV of references keyed by id (e.g. references.es.tsv)")
    group.add_argument("--src-lang", nargs="+", default=None, metavar="LANG",
                       help="only the manifest rows of these source languages (column src_lang or lang)")
    group.add_argument("--max-duration", type=float, default=None, metavar="S",
                       help="only the manifest rows whose duration_s is at most S seconds")
    group.add_argument("--limit", type=int, default=None, help="evaluate only the first N utterances")


def _add_task_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--task", choices=("transcribe", "translate"), default="transcribe",
                   help="Whisper task (translate: into English); default transcribe")


def _add_scoring_arguments(p: argparse.ArgumentParser, long_form: bool = False) -> None:
    """The scoring options; with ``long_form`` the metric lists also take the long-form metrics."""
    group = p.add_argument_group("scoring")
    group.add_argument("--eval-latency-unit", choices=LATENCY_UNITS, default="word",
                       help="latency unit: word, char (zh/ja) or spm (default word)")
    group.add_argument("--eval-latency-spm-model", default=None, help="SentencePiece model for the spm unit")
    latency = list(LATENCY_METRICS)
    latency_help = (f"latency metrics (default {' '.join(DEFAULT_LATENCY_METRICS)}; "
                    f"also {' '.join(n for n in LATENCY_METRICS if n not in DEFAULT_LATENCY_METRICS)})")
    quality_help = f"quality metrics (default {' '.join(QUALITY_METRICS)})"
    if long_form:
        latency += list(LONGFORM_METRICS)
        latency_help += f"; --long-form: {' '.join(LONGFORM_METRICS)} (default all)"
        quality_help += "; --long-form at the char unit: those that do not count words"
    group.add_argument("--latency-metrics", nargs="+", default=None, choices=latency, metavar="NAME",
                       help=latency_help)
    group.add_argument("--quality-metrics", nargs="+", default=None, choices=QUALITY_METRICS, metavar="NAME",
                       help=quality_help)
    group.add_argument("--sacrebleu-tokenizer", default=DEFAULT_SACREBLEU_TOKENIZER,
                       help="sacreBLEU tokenizer: 13a (default), zh, ja-mecab, char, intl, ...")


def _add_longform_arguments(p: argparse.ArgumentParser) -> None:
    group = p.add_argument_group(
        "long-form",
        "one instance per talk, resegmented onto the reference sentences as OmniSTEval does; scores "
        f"{', '.join(QUALITY_METRICS)}, {', '.join(LONGFORM_METRICS)} (and _CA), or what --quality-metrics / "
        "--latency-metrics choose",
    )
    group.add_argument("--long-form", action="store_true",
                       help="score each instance as a whole talk against --references and --segmentation")
    group.add_argument("--references", metavar="FILE", help="reference sentences, one per line (one per segment)")
    group.add_argument("--segmentation", metavar="FILE",
                       help="the talks' segmentation, YAML or JSON: per sentence wav, offset, duration (seconds)")
    group.add_argument("--resegmenter", choices=list(RESEGMENTERS), default="soft",
                       help="; ".join(f"{name}: {r.summary}" for name, r in RESEGMENTERS.items()))
    group.add_argument("--lang", default=None, metavar="CODE",
                       help="Moses-tokenize this language for the alignment, as OmniSTEval's --lang (default none)")
    group.add_argument("--fix-elapsed", action="store_true",
                       help="count only the compute since the previous word in elapsed (OmniSTEval's "
                            "--fix_simuleval_emission_ca)")
    group.add_argument("--offset-delays", action="store_true",
                       help="the delays count from each talk's first segment, not from the start of its audio")


def _add_eval_arguments(p: argparse.ArgumentParser) -> None:
    _add_scoring_arguments(p)
    p.add_argument("--computation-aware", action=argparse.BooleanOptionalAction, default=True,
                   help="record elapsed = source time + compute time and score the NAME_CA metrics (default on)")
    p.add_argument("--realtime", action="store_true",
                   help="feed each utterance at the pace of a live speaker: the stream decodes what has arrived, "
                        "and elapsed is the wall-clock time of each output, so NAME_CA is the delay a listener "
                        "meets; takes as long as the audio (one utterance at a time, locally)")
    p.add_argument("--no-progress-bar", action="store_true", help="no progress bar")


def items_from_args(args: argparse.Namespace) -> list[TestItem]:
    """The test set named by the arguments (manifest(s) or SimulEval lists), cut to ``--limit``."""
    manifests = args.manifest if isinstance(args.manifest, list) else ([args.manifest] if args.manifest else [])
    if manifests and args.source:
        raise OptionError("give either a manifest or --source/--target, not both")
    if args.source:
        if args.references or args.reference_column:
            raise OptionError("--references/--reference-column apply to manifests; --target gives the references")
        if args.src_lang or args.max_duration is not None:
            raise OptionError("--src-lang/--max-duration select manifest rows; SimulEval lists have no such columns")
        items = read_simuleval_lists(args.source, args.target, args.tgt_lang)
    elif manifests:
        if args.target:
            raise OptionError("--target goes with --source (a manifest carries its own references)")
        items = []
        for manifest in manifests:
            items += read_manifest(manifest, args.reference_column, args.references, args.tgt_lang,
                                   args.src_lang, args.max_duration)
        ids = [it.id for it in items]
        dup = sorted({i for i in ids if ids.count(i) > 1})
        if dup:
            raise TestSetError(f"the manifests share utterance ids: {', '.join(dup[:5])}")
    else:
        raise OptionError("no test set: give a manifest TSV, or --source (and --target)")
    if args.limit is not None:
        if args.limit < 1:
            raise OptionError(f"--limit must be >= 1, got {args.limit}")
        items = items[: args.limit]
    return items


def _scoring_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The :class:`ScoreOptions` fields that ``eval``, ``sweep`` and ``score`` read alike."""
    return {
        "latency_unit": args.eval_latency_unit,
        "spm_model": args.eval_latency_spm_model,
        "latency_metrics": tuple(args.latency_metrics or DEFAULT_LATENCY_METRICS),
        "quality_metrics": tuple(args.quality_metrics or QUALITY_METRICS),
        "sacrebleu_tokenizer": args.sacrebleu_tokenizer,
        "computation_aware": args.computation_aware,
    }


def search_beams(args: argparse.Namespace, searches: Sequence[str]) -> dict[str, int]:
    """The beam of each search a sweep's ``--searches`` names: what ``--search NAME`` would give it under the
    ``--latency`` preset (``--beam`` when given; the preset's beam with the preset's own search only; else the
    option default), so that ``--latency low --searches greedy beam`` is not a beam search of 1."""
    given = given_options(args)
    chosen = latency_preset(args)
    default = SearchOptions().beam
    return {name: given.get("beam", chosen.settings_under({**given, "search": name}).get("beam", default))
            for name in searches}


def eval_options_from_args(args: argparse.Namespace, resume: bool = True) -> EvalOptions:
    """:class:`EvalOptions` from the parsed ``eval`` / ``sweep`` arguments."""
    from simulst.evaluation.runner import EvalOptions

    return EvalOptions(**_scoring_from_args(args), resume=resume,
                       progress=not args.no_progress_bar and sys.stderr.isatty(), realtime=args.realtime)


def score_options_from_args(args: argparse.Namespace) -> ScoreOptions:
    """:class:`ScoreOptions` from the parsed ``score`` arguments (short-form)."""
    if args.references or args.segmentation:
        raise OptionError("--references and --segmentation go with --long-form")
    long_form = [n for n in args.latency_metrics or () if n in LONGFORM_METRICS]
    if long_form:
        raise OptionError(f"{', '.join(long_form)}: long-form latency metrics, scored with --long-form")
    return ScoreOptions(**_scoring_from_args(args), use_ref_len=not args.no_use_ref_len)


def longform_options_from_args(args: argparse.Namespace) -> LongformOptions:
    """:class:`LongformOptions` from the parsed ``score --long-form`` arguments."""
    if not args.references or not args.segmentation:
        raise OptionError("--long-form needs --references (one sentence per line) and --segmentation (YAML/JSON)")
    if args.eval_latency_unit == "spm":
        raise OptionError("long-form scoring counts words or characters: --eval-latency-unit word or char")
    return LongformOptions(
        method=args.resegmenter,
        lang=args.lang,
        unit=args.eval_latency_unit,
        sacrebleu_tokenizer=args.sacrebleu_tokenizer,
        computation_aware=args.computation_aware,
        fix_elapsed=args.fix_elapsed,
        offset_delays=args.offset_delays,
        latency_metrics=tuple(args.latency_metrics) if args.latency_metrics else None,
        quality_metrics=tuple(args.quality_metrics) if args.quality_metrics else None,
    )


def _print_report(report: ScoreReport, as_json: bool) -> None:
    if as_json:
        print(report.to_json())
    else:
        print(format_table(report))


def _write_folder(args: argparse.Namespace) -> Path | None:
    """Where ``score --write`` writes: the log's folder (None without ``--write``)."""
    if not args.write:
        return None
    target = Path(args.logdir)
    return target if target.is_dir() else target.parent


# ------------------------------------------------------------------------------------------------- commands


def engine_from_args(args: argparse.Namespace) -> Engine:
    """The speech engine the arguments name, or with ``--to LANG`` the cascade ASR -> MT."""
    from simulst.streaming.engine import SpeechEngine

    if args.to:
        if args.task != "transcribe":
            raise OptionError("a cascade (--to) transcribes, then translates: drop --task translate")
        return cascade_from_args(args)
    return SpeechEngine.load(model_options_from_args(args, task=args.task))


def cluster_from_args(args: argparse.Namespace, jobs: int = 1) -> ClusterOptions | None:
    """The Ray cluster options of ``--cluster ray`` (None: a local run); checks the flags that do not go with it
    (``jobs``: a sweep's ``--jobs``)."""
    if args.cluster == "local":
        given = [flag for flag, value, default in (("--ray-address", args.ray_address, None),
                                                   ("--ray-cpus-per-task", args.ray_cpus_per_task, 1.0),
                                                   ("--ray-retries", args.ray_retries, 3)) if value != default]
        if given:
            raise OptionError(f"{', '.join(given)} go with --cluster ray")
        return None
    if args.to:
        raise OptionError("a cascade (--to) runs locally: drop --cluster ray")
    if jobs != 1:
        raise OptionError("--jobs is for local sweeps; on a cluster every CPU runs tasks")
    from simulst.evaluation.cluster import ClusterOptions

    return ClusterOptions(address=args.ray_address, cpus_per_task=args.ray_cpus_per_task, retries=args.ray_retries)


def eval_command(args: argparse.Namespace) -> int:
    """``simulst eval``: run the test set, write the folder, print the scores."""
    from simulst.evaluation.cluster import ClusterRun, run_on_cluster
    from simulst.evaluation.runner import make_run_config, run_eval

    items = items_from_args(args)
    options = stream_options_from_args(args)
    eval_options = eval_options_from_args(args, resume=not args.overwrite)
    info = {"argv": sys.argv[1:], "task": args.task, "device": args.device}
    cluster = cluster_from_args(args)
    if cluster is not None:
        model = model_options_from_args(args, task=args.task)
        run = ClusterRun(options, Path(args.output), info)
        _print_report(run_on_cluster(model, [run], items, eval_options, cluster)[0], args.json)
        return 0
    engine = engine_from_args(args)
    config = make_run_config(engine.describe(), options, items, eval_options, info)
    report = run_eval(engine, options, items, args.output, eval_options, config)
    _print_report(report, args.json)
    return 0


def score_command(args: argparse.Namespace) -> int:
    """``simulst score``: score an existing log and print a table or JSON (``--long-form``: each instance a talk,
    resegmented onto its reference sentences)."""
    folder = _write_folder(args)
    if args.long_form:
        longform = score_longform_log(args.logdir, args.references, args.segmentation, longform_options_from_args(args))
        if folder:
            write_longform_scores(folder, longform)
        _print_report(longform, args.json)
        return 0
    report = score_log(args.logdir, score_options_from_args(args))
    if folder:
        write_scores(folder, report)
    _print_report(report, args.json)
    return 0


def sweep_command(args: argparse.Namespace) -> int:
    """``simulst sweep``: run the grid, write sweep.csv / sweep.md / plots, print the Markdown table."""
    from simulst.evaluation.sweep import (
        build_grid,
        parse_grid,
        quality_metric_for,
        run_sweep,
        run_sweep_on_cluster,
        write_table,
    )
    from simulst.streaming.engine import SpeechEngine

    items = items_from_args(args)
    base = stream_options_from_args(args)
    points = build_grid(base, args.policies or [args.policy], args.chunks or [], args.searches or [],
                        parse_grid(args.grid), search_beams(args, args.searches or []))
    eval_options = eval_options_from_args(args)
    cluster = cluster_from_args(args, args.jobs)
    if args.jobs > 1 and args.to:
        raise OptionError("cascade sweeps (--to) run in one process: use --jobs 1")
    if args.jobs > 1:  # every worker loads the model from the same options, built once here
        factory: Callable[[], Engine] = functools.partial(
            SpeechEngine.load, model_options_from_args(args, task=args.task)
        )
    else:
        def factory() -> Engine:
            return engine_from_args(args)

    def report(point: Any, scores: Mapping[str, Any]) -> None:
        shown = ", ".join(f"{k} {scores[k]:.3f}" for k in ("BLEU", "WER_whisper", "AL", "LAAL", "AL_CA")
                          if isinstance(scores.get(k), int | float))
        print(f"[sweep] {point.label}: {shown}", file=sys.stderr, flush=True)

    if cluster is not None:
        rows = run_sweep_on_cluster(model_options_from_args(args, task=args.task), points, items, args.output,
                                    eval_options, cluster, report)
    else:
        rows = run_sweep(factory, points, items, args.output, eval_options, args.jobs, report)
    preferred = args.plot_quality or ("WER_whisper" if args.task == "transcribe" else None)
    quality = quality_metric_for(rows, preferred)
    shown_quality = [q for q in ("BLEU", "chrF", "WER_whisper", "WER_norm") if q in rows[0]]
    _, md = write_table(rows, args.output, quality=shown_quality)
    plot_sweep(rows, args.output, quality)
    print(md.read_text(encoding="utf-8"), end="")
    return 0
