"""Does a translate preset track offline decoding on speech it was not chosen on?

The translate presets were chosen on the fleurs-multi de + fr utterances (the only ones with English references
in ``../shared/data``). The es + pt utterances of the same set have no English reference, so they cannot give a
BLEU; they can still show whether a streaming configuration reproduces what the same model writes offline. This
script streams the es + pt utterances (20) with ``bench/quality_latency.py``'s configurations and scores each
against the **offline output** as its reference (BLEU / chrF "agreement with offline"), with the paired bootstrap
95 % interval of the difference between two configurations over utterances. It also scores the de + fr logs of
``quality_latency.py`` the same way, so a reader sees whether agreement ranks the configurations as the real
references do there.

Agreement is a proxy (offline decoding is not always right); it is used here only to check on other speech a
choice made on de + fr, never to choose.

    OMP_NUM_THREADS=2 .venv/bin/python bench/translate_agreement.py [--configs offline,before,balanced,...]
        [--variant NAME="FLAGS" ...]

A variant (``bench/quality_latency.py``'s ``--variant``: command-line flags over ``--latency balanced``) is run on
es + pt and compared with ``balanced`` on both sets; its de + fr log is the one ``quality_latency.py --variant``
kept (``translate_explore/NAME/``). A variant named ``...-grid-K`` is one more chunk grid of a configuration
(``--initial-wait-ms``), compared with nothing alone: ``--pool "A1,A2,A3:B1,B2,B3"`` compares two configurations
over their grids, each utterance drawn with its outputs on every grid (as ``bench/pooled_grids.py``).

``--reference NAME`` scores against the outputs of configuration NAME instead of ``offline`` (greedy offline
decoding, run when the presets searched greedily): ``offline-b3`` (offline decoding with a beam of 3, the search of
today's ``balanced``) is the fairer reference for a configuration that searches with a beam. Its page is
``translate_agreement_<NAME>.md``.

Writes ``bench/results/translate_agreement.md`` and keeps the es + pt logs under
``bench/results/quality_latency/translate_es_pt/<config>/instances.log``. The page's earlier rows stay (as
``bench/pooled_grids.py`` keeps its own): a row this run computes again replaces its line, a new one is added.

``--per-language ESPT=DEFR,...`` runs nothing and writes ``translate_agreement_per_language_<reference>.md``: the
agreement of each named configuration with the reference, language by language (es and pt from the es + pt log
ESPT, de and fr from the de + fr log DEFR; a bare NAME is both), and on de and fr the BLEU against the real
references, so a reader sees which of the languages without references the proxy flags::

    .venv/bin/python bench/translate_agreement.py --reference offline-b3 --per-language \
        offline,before,low,tbal=balanced,accurate,tbal-grid-1=tpushgrid-grid-1,tbal-grid-2=tpushgrid-grid-2
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from simulst.evaluation.bootstrap import paired_bootstrap
from simulst.evaluation.instances import SIMULST_KEY, InstanceRecord, read_log, write_log
from simulst.evaluation.manifest import TestItem
from simulst.evaluation.quality import bleu, chrf

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import DATA, load_average, machine_note, markdown_table, write_report
from pooled_grids import merged_rows, pooled_interval
from quality_latency import RESULTS, configs, explored, parse_variant, run

LANGS = ("es", "pt")
PRESET_CONFIGS = ("offline", "before", "low", "balanced", "accurate")
PAIRS = (("before", "balanced"), ("before", "accurate"), ("before", "low"), ("low", "balanced"))
GRID = re.compile(r"-grid-\d+$")  # (a variant that is another chunk grid of a configuration: pooled, not paired)


def items(langs: Sequence[str]) -> list[tuple[str, TestItem]]:
    """The fleurs-multi utterances of ``langs``, without references (they have no English one)."""
    out = []
    for line in (DATA / "fleurs-multi.tsv").read_text(encoding="utf-8").splitlines()[1:]:
        uid, audio, duration, _transcript, lang = line.split("\t")[:5]
        if lang in langs:
            out.append((lang, TestItem(uid, DATA / audio, None, float(duration), "en")))
    return out


def agreement_rows(logs: dict[str, list[InstanceRecord]], data: str,
                   pairs: Sequence[tuple[str, str]] = PAIRS, reference: str = "offline") -> list[dict[str, object]]:
    """Per configuration: BLEU / chrF against the ``reference`` configuration's outputs; per pair: the paired
    bootstrap interval."""
    references = [r.prediction for r in logs[reference]]
    rows: list[dict[str, object]] = []
    for name, records in logs.items():
        if name == reference:
            continue
        hyps = [r.prediction for r in records]
        rows.append({"data": data, "config": name, "n": len(hyps),
                     "BLEU_vs_offline": bleu(hyps, references), "chrF_vs_offline": chrf(hyps, references)})
    for a, b in pairs:
        if a in logs and b in logs:
            row: dict[str, object] = {"data": data, "config": f"{b} − {a}", "n": len(references)}
            for metric in ("BLEU", "chrF"):
                row[f"{metric}_vs_offline"] = paired_bootstrap(
                    metric, [r.prediction for r in logs[a]], [r.prediction for r in logs[b]], references).describe()
            rows.append(row)
    return rows


def pooled_rows(logs: dict[str, list[InstanceRecord]], data: str,
                pools: Sequence[tuple[list[str], list[str]]], reference: str = "offline") -> list[dict[str, object]]:
    """Per pool (A's grids, B's grids, in the same order): the paired bootstrap interval of B − A in agreement with
    the ``reference`` configuration over all the grids, each utterance drawn with its outputs on every grid."""
    references = [r.prediction for r in logs[reference]]
    rows: list[dict[str, object]] = []
    for names_a, names_b in pools:
        if not all(name in logs for name in [*names_a, *names_b]):
            continue
        row: dict[str, object] = {"data": data, "config": f"{','.join(names_b)} − {','.join(names_a)}",
                                  "n": len(references)}
        for metric in ("BLEU", "chrF"):
            row[f"{metric}_vs_offline"] = pooled_interval(metric, [logs[n] for n in names_a],
                                                          [logs[n] for n in names_b], references).describe()
        rows.append(row)
    return rows


def per_language_rows(logs: dict[str, tuple[list[InstanceRecord], list[InstanceRecord]]], reference: str,
                      language_of: dict[str, str]) -> list[dict[str, object]]:
    """Per configuration (its es + pt and de + fr logs, ``reference``'s first) and language (``language_of`` an
    utterance id): BLEU / chrF against ``reference``'s outputs of the same utterances, and on de and fr the BLEU
    against the real references."""
    by_id = {name: {r.extra[SIMULST_KEY]["id"]: r for log in pair for r in log} for name, pair in logs.items()}
    ids = sorted(by_id[reference])
    for name, records in by_id.items():
        if sorted(records) != ids:
            raise SystemExit(f"{name}: its logs are not of the reference's utterances")
    rows: list[dict[str, object]] = []
    for lang in ("de", "fr", *LANGS):
        chosen = [i for i in ids if language_of[i] == lang]
        if not chosen:
            continue
        references = [by_id[reference][i].prediction for i in chosen]
        for name, records in by_id.items():
            if name == reference:
                continue
            hyps = [records[i].prediction for i in chosen]
            row: dict[str, object] = {"language": lang, "config": name, "n": len(chosen),
                                      "BLEU_vs_offline": bleu(hyps, references),
                                      "chrF_vs_offline": chrf(hyps, references)}
            if lang not in LANGS:
                row["BLEU_vs_reference"] = bleu(hyps, [records[i].reference or "" for i in chosen])
            rows.append(row)
    return rows


def write_per_language(specs: str, reference: str, root: Path) -> Path:
    """``--per-language``: read the named logs and write the per-language page; its path."""
    logs: dict[str, tuple[list[InstanceRecord], list[InstanceRecord]]] = {}
    for spec in [reference, *(s.strip() for s in specs.split(",") if s.strip())]:
        es_pt, name = spec.partition("=")[0], de_fr_name(spec)
        dev = root / "translate" / name / "instances.log"
        if not dev.is_file():
            dev = root / "translate_explore" / name / "instances.log"
        logs[name] = (read_log(root / "translate_es_pt" / es_pt / "instances.log"), read_log(dev))
    language_of = {item.id: lang for lang, item in items(("de", "fr", *LANGS))}
    rows = per_language_rows(logs, de_fr_name(reference), language_of)
    page = RESULTS / f"translate_agreement_per_language_{reference}.md"
    header = (
        "# Agreement with offline decoding, language by language\n\n"
        "Written by `bench/translate_agreement.py --per-language` from the kept logs (it runs nothing). "
        f"BLEU / chrF_vs_offline: sacreBLEU of each configuration's outputs with the outputs of `{reference}` of the "
        "same utterances as the references; BLEU_vs_reference: against the real English "
        "references (de and fr only; es and pt have none here). A configuration is named by its de + fr log; "
        "its es + pt log may have another name (the command line says which).\n\n"
        f"* {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: `--reference {reference} --per-language {specs}`.\n\n"
    )
    columns = ["language", "config", "n", "BLEU_vs_offline", "chrF_vs_offline", "BLEU_vs_reference"]
    write_report(page, header + markdown_table(rows, columns))
    return page


def de_fr_name(spec: str) -> str:
    """The de + fr name of ``ESPT=DEFR`` (or of a bare NAME)."""
    es_pt, _, de_fr = spec.partition("=")
    return de_fr or es_pt


def parse_pool(spec: str) -> tuple[list[str], list[str]]:
    """``A1,A2,...:B1,B2,...``: the grids of A and of B."""
    side_a, sep, side_b = spec.partition(":")
    names_a, names_b = side_a.split(","), side_b.split(",")
    if not sep or len(names_a) != len(names_b):
        raise SystemExit(f"bad --pool {spec!r}: A1,A2,...:B1,B2,... (as many grids on each side)")
    return names_a, names_b


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configs", default=",".join(PRESET_CONFIGS),
                        help="the configurations to run on es + pt (the others' kept logs are scored); '': none")
    parser.add_argument("--variant", action="append", default=[], metavar='NAME="FLAGS"',
                        help="also run a variant of balanced (as quality_latency.py's --variant; repeatable)")
    parser.add_argument("--pool", action="append", default=[], metavar="A1,A2,...:B1,B2,...",
                        help="also compare two configurations over their chunk grids (repeatable)")
    parser.add_argument("--reference", default="offline",
                        help="the configuration whose outputs are the references (default: offline)")
    parser.add_argument("--rescore", action="store_true", help="score the kept logs again; run nothing")
    parser.add_argument("--per-language", metavar="ESPT=DEFR,...",
                        help="run nothing; write the per-language page of these configurations' kept logs")
    args = parser.parse_args()
    if args.per_language:
        print(write_per_language(args.per_language, args.reference, RESULTS / "quality_latency").read_text())
        return
    pools = [parse_pool(spec) for spec in args.pool]
    load_before = load_average()
    table = configs("translate")
    to_run = [n.strip() for n in args.configs.split(",") if n.strip()]
    pairs = list(PAIRS)
    for spec in args.variant:
        chosen = parse_variant("translate", spec)
        table[chosen.name] = chosen
        to_run.append(chosen.name)
        if not GRID.search(chosen.name):
            pairs.append(("balanced", chosen.name))
    reference = args.reference
    names = list(dict.fromkeys([*PRESET_CONFIGS, reference, *to_run, *(n for a, b in pools for n in [*a, *b])]))
    root = RESULTS / "quality_latency"
    logs: dict[str, list[InstanceRecord]] = {}
    for name in names:
        path = root / "translate_es_pt" / name / "instances.log"
        if args.rescore or name not in to_run:
            if path.is_file():
                logs[name] = read_log(path)
            continue
        started = time.perf_counter()
        logs[name] = run("translate", table[name], items(LANGS), realtime=False)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_log(path, logs[name])
        print(f"es+pt {name}: {time.perf_counter() - started:.0f} s", flush=True)
    dev = {name: read_log(root / "translate" / name / "instances.log") for name in names
           if (root / "translate" / name / "instances.log").is_file()}
    dev.update({name: log for name, (_, log) in explored(root, "translate").items() if name in names})
    references = [r.reference or "" for r in dev["offline"]]
    rows = (agreement_rows(logs, "es+pt (not tuned on)", pairs, reference)
            + pooled_rows(logs, "es+pt (not tuned on)", pools, reference)
            + agreement_rows(dev, "de+fr (tuned on)", pairs, reference)
            + pooled_rows(dev, "de+fr (tuned on)", pools, reference))
    for row in rows:  # on de + fr the real references too, to compare the proxy's ranking with theirs
        config = str(row["config"])
        if str(row["data"]).startswith("de+fr") and config in dev:
            row["BLEU_vs_reference"] = bleu([r.prediction for r in dev[config]], references)
    page = RESULTS / ("translate_agreement.md" if reference == "offline" else f"translate_agreement_{reference}.md")
    old = page.read_text(encoding="utf-8") if page.is_file() else ""
    run_notes = [line for line in old.splitlines() if line.startswith("* Run")]
    if not args.rescore and to_run:
        run_notes.append(f"* Run {len(run_notes) + 1}: {', '.join(to_run)}: {machine_note(load_before)}.")
    header = (
        "# Translate presets against offline decoding, on speech they were not chosen on\n\n"
        "Written by `bench/translate_agreement.py` (its docstring says why and how). BLEU / chrF_vs_offline: "
        "sacreBLEU of each configuration's outputs with "
        + ("Whisper base's offline outputs (greedy)" if reference == "offline" else f"the outputs of `{reference}`")
        + " of the same utterances as the references; rows `B − A`: the paired bootstrap 95 % interval of that "
        "difference over utterances (1000 resamples). BLEU_vs_reference: against the real English references "
        "(de + fr only).\n\n"
        + "\n".join(run_notes) + "\n\n"
    )
    columns = ["data", "config", "n", "BLEU_vs_offline", "chrF_vs_offline", "BLEU_vs_reference"]
    lines = merged_rows(old, "data", rows, columns, key_until="n")  # (the rows of earlier runs stay)
    write_report(page, header + markdown_table([], columns) + "\n" + "\n".join(lines))
    print(page.read_text(encoding="utf-8"))


if __name__ == "__main__":
    main()
