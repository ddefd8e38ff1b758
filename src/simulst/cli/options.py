"""Command-line options of every subcommand that runs streams (transcribe, translate, live, serve, eval, sweep), derived
from the option dataclasses' fields: each flagged field (:mod:`simulst.config.fields`) is one argument, with the
field's default and its help; :func:`options_from_args` turns the parsed arguments back into the frozen options
object by field name, which validates them once, as it is built."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from simulst.config import POLICIES, Flag, ModelOptions, Nested, PolicyOptions, StreamOptions
from simulst.config.fields import CTC, FLAG, LONG_FORM, MODEL, NESTED, ONLINE
from simulst.config.presets import DEFAULT_LATENCIES, LATENCIES, Preset, preset
from simulst.errors import OptionError
from simulst.models.base import SpeechModel

OptionsT = TypeVar("OptionsT")

GIVEN = "given_options"
"""The attribute of the parsed arguments that holds the dests of the option flags given on the command line."""


class _Given(argparse.Action):
    """Stores the value and notes that the flag was given (a latency preset does not override it)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        setattr(namespace, self.dest, values)
        _note_given(namespace, self.dest)


class _GivenSwitch(argparse.BooleanOptionalAction):
    """A ``--x`` / ``--no-x`` switch that notes it was given."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        super().__call__(parser, namespace, values, option_string)
        _note_given(namespace, self.dest)


def _note_given(namespace: argparse.Namespace, dest: str) -> None:
    given = vars(namespace).get(GIVEN)
    if not isinstance(given, set):
        given = set()
        setattr(namespace, GIVEN, given)
    given.add(dest)


@dataclass(frozen=True)
class CliOption:
    """A flagged field as the command line shows it: ``flag`` (renamed by a nesting group) and the field's
    ``default``."""

    field: str
    flag: Flag
    default: Any


class ArgumentGroups:
    """A parser's help sections by title, each created when first used (an empty one is not shown)."""

    def __init__(self, parser: argparse.ArgumentParser) -> None:
        self.parser = parser
        self._groups: dict[str, argparse._ArgumentGroup] = {}

    def __getitem__(self, title: str) -> argparse._ArgumentGroup:
        if title not in self._groups:
            self._groups[title] = self.parser.add_argument_group(title)
        return self._groups[title]

    def add(self, option: CliOption, unset: bool = False) -> None:
        """Add ``option``'s argument; ``unset``: its default is None (it refines another option when given)."""
        flag = option.flag
        default = str(option.default) if flag.build is not None else option.default  # (the text it is built from)
        kwargs: dict[str, Any] = {"dest": flag.dest, "default": None if unset else default,
                                  "help": _help(flag, option.default)}
        if isinstance(option.default, bool):
            kwargs["action"] = _GivenSwitch
        else:
            kwargs.update(action=_Given, type=_argument_type(flag, option.default), metavar=flag.metavar,
                          choices=flag.choices)
        self[flag.group].add_argument(flag.name, **kwargs)


def cli_options(cls: type, within: Nested | None = None) -> Iterator[CliOption]:
    """The flagged fields of the option class ``cls``, in field order, a nested group's in its place."""
    defaults = cls()
    for field in _fields(cls, within):
        value = getattr(defaults, field.name)
        inner = field.metadata.get(NESTED)
        if inner is not None:
            yield from cli_options(type(value), _within(within, inner))
        elif FLAG in field.metadata:
            yield CliOption(field.name, _flag(field, within), value)


def options_from_args(cls: type[OptionsT], args: argparse.Namespace, within: Nested | None = None,
                      **given: Any) -> OptionsT:
    """The options object ``cls`` from the parsed arguments: each flagged field from its argument (a nested group
    built likewise), the fields in ``given`` as given, the others at their defaults. Building validates.

    Raises:
        OptionError: as the options' validation does.
    """
    values = dict(given)
    for field in _fields(cls, within):
        inner = field.metadata.get(NESTED)
        if field.name in values:
            continue
        if inner is not None:
            values[field.name] = options_from_args(type(getattr(cls(), field.name)), args, _within(within, inner))
        elif FLAG in field.metadata:
            values[field.name] = _value(_flag(field, within), args)
    return cls(**values)


def add_stream_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the model, onlinization, long-form and CTC options: every flagged field of :class:`ModelOptions` and
    :class:`StreamOptions` (its search included), and those of the registered policies' own options (``--policy
    ctc``'s ``--ctc-threshold``), which refine ``--policy`` when given."""
    groups = ArgumentGroups(parser)
    for title in (MODEL, ONLINE, LONG_FORM, CTC):  # the sections in this order
        groups[title]
    groups[ONLINE].add_argument(
        "--latency", choices=LATENCIES, default=None,
        help="the operating point, chosen per task on its dev data: low (the least delay), balanced, accurate "
             "(the best live quality); it sets the chunk, policy, window, buffer and VAD options that are not given "
             "(docs/presets.md) (default: " + ", ".join(f"{latency} for {task}" for task, latency in
                                                        DEFAULT_LATENCIES.items()) + ")")
    for option in [*cli_options(ModelOptions), *cli_options(StreamOptions)]:
        groups.add(option)
    for option in _policy_refinements():
        groups.add(option, unset=True)
    # a run over several policies (sweep --policies) names them here: the model then loads a CTC head for any
    parser.set_defaults(policies=None)


def show_preset_values(parser: argparse.ArgumentParser, task: str) -> None:
    """Append to the help of every option that a ``task`` preset sets the value each ``--latency`` gives it:
    ``--help`` shows an option's own default, which the preset in force replaces unless the option is given."""
    settings = {latency: preset(task, latency).settings for latency in LATENCIES}
    for action in parser._actions:
        if action.dest == "latency" and action.help:
            scope = ("with --to LANG, the transcribe presets apply" if task == "translate"
                     else "low's with Whisper tiny.en and its CTC head")
            action.help += f"; each option's help says what the {task} presets set it to ({scope})"
        values = {latency: s[action.dest] for latency, s in settings.items() if action.dest in s}
        if values and action.help:
            action.help += "; --latency sets it: " + ", ".join(f"{k} {_shown(v)}" for k, v in values.items())


def stream_options_from_args(args: argparse.Namespace, task: str | None = None) -> StreamOptions:
    """Build (and validate) :class:`StreamOptions` from parsed arguments, under the ``--latency`` preset of
    ``task`` (None: the arguments' ``task``, else ``transcribe``); raises ``OptionError``."""
    apply_latency_preset(args, task)
    return options_from_args(StreamOptions, args)


def apply_latency_preset(args: argparse.Namespace, task: str | None = None) -> None:
    """Set the arguments of the ``--latency`` preset of ``task`` (None: the arguments' ``task``, else
    ``transcribe``) that were not given on the command line; the ones given win (:meth:`Preset.settings_under
    <simulst.config.presets.Preset.settings_under>`, the Python API's rule too). The segment and the buffer bound
    each other (``--segment-s`` <= ``--max-buffer-s``): where only one is given, the other yields to it. A preset's
    beam goes with its search: ``--search`` naming another search without ``--beam`` keeps the option default beam
    (``--latency low --search beam`` is not a beam of 1)."""
    for name, value in latency_preset(args, task).settings_under(given_options(args)).items():
        setattr(args, name, value)


def latency_preset(args: argparse.Namespace, task: str | None = None) -> Preset:
    """The ``--latency`` preset of ``task`` (None: the arguments' ``task``, else ``transcribe``; no ``--latency``:
    the task's default) as it applies to the arguments' model and CTC head (:meth:`Preset.for_model
    <simulst.config.presets.Preset.for_model>`)."""
    return preset(task or vars(args).get("task") or "transcribe", args.latency).for_model(
        vars(args).get("model"), "ctc_head" in given_options(args))


def given_options(args: argparse.Namespace) -> dict[str, Any]:
    """The options given on the command line, by dest, with their values."""
    return {name: vars(args)[name] for name in vars(args).get(GIVEN) or ()}


def ctc_head_from_args(args: argparse.Namespace) -> str | None:
    """``--ctc-head``, or ``"default"`` (the shipped head) when a CTC policy or weight is asked for without one."""
    if args.ctc_head:
        return str(args.ctc_head)
    specs = [args.policy, *(args.policies or [])]
    wants = any(PolicyOptions.parse(str(spec)).needs_ctc_head for spec in specs)
    return "default" if wants or args.ctc_weight > 0 else None


def model_options_from_args(args: argparse.Namespace, task: str = "transcribe") -> ModelOptions:
    """The :class:`ModelOptions` the arguments name, under ``task``'s ``--latency`` preset (built once; every process
    loads the model from them)."""
    apply_latency_preset(args, task)
    return options_from_args(ModelOptions, args, task=task, ctc_head=ctc_head_from_args(args))


def model_from_args(args: argparse.Namespace, task: str = "transcribe") -> SpeechModel:
    """Load the model the arguments name; raises ``ModelLoadError`` / ``OptionError``."""
    from simulst.models.loading import load_model  # (torch: loaded with the model, not with the parser)

    return load_model(model_options_from_args(args, task))


# ------------------------------------------------------------------------------------------------- helpers


def _fields(cls: type, within: Nested | None) -> list[dataclasses.Field[Any]]:
    fields = dataclasses.fields(cls)
    return [f for f in fields if within is None or within.only is None or f.name in within.only]


def _within(outer: Nested | None, inner: Nested) -> Nested:
    """A nested group inside another: the prefixes joined, the outer section first."""
    if outer is None:
        return inner
    return Nested(outer.prefix + inner.prefix, inner.only, outer.group or inner.group)


def _flag(field: dataclasses.Field[Any], within: Nested | None) -> Flag:
    flag: Flag = field.metadata[FLAG]
    return flag if within is None else flag.nested(within)


def _value(flag: Flag, args: argparse.Namespace) -> Any:
    """A field's value from its argument: built (``--policy``: parsed, then refined by its own options' flags)."""
    value = vars(args)[flag.dest]
    if flag.build is None:
        return value
    built = flag.build(value)
    return _refined(built, args) if flag.refine else built


def _refined(options: Any, args: argparse.Namespace) -> Any:
    """``options`` (a policy's), with the flags of its own fields that were given (``--ctc-threshold``)."""
    changes = {option.field: vars(args)[option.flag.dest] for option in cli_options(type(options))
               if vars(args)[option.flag.dest] is not None}
    return dataclasses.replace(options, **changes) if changes else options


def _policy_refinements() -> list[CliOption]:
    """The flags of every registered policy's own options class, once each."""
    found: dict[str, CliOption] = {}
    for spec in POLICIES.entries():
        for option in cli_options(spec.options_type):
            found.setdefault(option.flag.name, option)
    return list(found.values())


def _help(flag: Flag, default: Any) -> str:
    """The flag's help with its choices filled in and its default appended (``%`` escaped for argparse)."""
    text = flag.help.format(choices=flag.listing()) if flag.listing is not None else flag.help
    shown = flag.default_help if flag.default_help is not None else _shown(default)
    return f"{text} (default: {shown})".replace("%", "%%")


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if value is None:
        return "none"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _argument_type(flag: Flag, default: Any) -> Callable[[str], Any]:
    """What argparse converts the text with: the flag's parser (its errors as argparse's), else the default's type."""
    parse = flag.parse
    if parse is None:
        return type(default) if isinstance(default, int | float) else str
    checked = parse

    def convert(text: str) -> Any:
        try:
            return checked(text)
        except OptionError as err:
            raise argparse.ArgumentTypeError(str(err)) from err

    convert.__name__ = getattr(parse, "__name__", "value")
    return convert
