"""The user's commands, in one table: each key's action, footer label, help row and palette entry.

The app's key bindings, the help screen's rows, the command palette and the sets of actions that
need a running engine or the main screen are all generated from `COMMANDS`, so a command cannot
have a key without a help line or a palette entry (a test checks it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from textual.actions import parse as parse_action
from textual.binding import Binding

from cockpit.widgets.loss import LossPanel

LR_STEP = 1.25  # + and - scale the learning rate by this factor
PANEL_IDS = ("loss", "lr", "device", "memory", "samples")
PANEL_TITLES = {
    "loss": "loss",
    "lr": "learning rate",
    "device": "device",
    "memory": "memory",
    "samples": "samples",
}
# How the help screen and the palette write Textual's key names.
KEY_SYMBOLS = {"plus": "+", "minus": "-", "question_mark": "?"}


@dataclass(frozen=True)
class Command:
    """One command the user can give: its key(s), and how the footer, help and palette show it."""

    action: str  # the App's action (`action_<name>`), with arguments as a binding writes them
    keys: str  # Textual key names, comma-separated; the first is the one the help shows
    footer: str = ""  # the footer's label (the binding's description)
    show: bool = True  # whether the footer shows it
    priority: bool = False  # the key works in dialogs too
    # Bindings of `keys` to other actions instead of `action`: space binds pause and resume, and
    # `check_action` shows whichever applies; the palette runs `action` (toggle_pause).
    bound_as: tuple[tuple[str, str], ...] = ()
    textual_binds: bool = False  # Textual binds the key itself (tab, ctrl+p): help only
    help_keys: str = ""  # the help's key column when it is not the first key's symbol
    help: str = ""  # the help's description; "" = covered by the row above (2-5 by "1-5")
    joins_row: bool = False  # " / "-joined onto the row above: "+ / -", "s / e", "t / g"
    title: str = ""  # the palette's title
    summary: str = ""  # the palette's description, before the key in brackets
    palette_as: str = ""  # no palette entry of its own: this other command's entry does it
    needs_engine: bool = False  # disabled while nothing runs (and with a dialog open)
    main_only: bool = True  # only on the main screen (a dialog's own keys win)

    @property
    def name(self) -> str:
        """The action's name without its arguments: what `check_action` is asked about."""
        return parse_action(self.action)[1]

    @property
    def key_symbol(self) -> str:
        first = self.keys.split(",")[0]
        return KEY_SYMBOLS.get(first, first)


# the loss panel's own keys (its BINDINGS): the table adds their help and palette lines
LOSS_KEYS = {binding.action: binding for binding in LossPanel.BINDINGS if isinstance(binding, Binding)}


def _loss_command(action: str, *, help: str, title: str, summary: str, joins_row: bool = False) -> Command:
    binding = LOSS_KEYS[action]
    return Command(
        action, binding.key, binding.description, show=binding.show, help=help,
        joins_row=joins_row, title=title, summary=summary,
    )  # fmt: skip


def _zoom_panel(number: int, panel_id: str) -> Command:
    title = PANEL_TITLES[panel_id]
    return Command(
        f"zoom_panel('{panel_id}')",
        str(number),
        f"Zoom {title}",
        show=False,
        help_keys=f"1-{len(PANEL_IDS)}" if number == 1 else "",
        help="zoom a panel: loss, LR, device, memory, samples" if number == 1 else "",
        title=f"Zoom {title}",
        summary=f"Fill the screen with the {title} panel, again to restore",
    )


COMMANDS: tuple[Command, ...] = (
    Command(
        "toggle_pause",
        "space",
        bound_as=(("pause", "Pause"), ("resume", "Resume")),
        help="pause / resume training",
        title="Pause / resume",
        summary="Pause or resume training",
        needs_engine=True,
    ),
    Command(
        "checkpoint",
        "c",
        "Ckpt",
        help="save a checkpoint now",
        title="Checkpoint now",
        summary="Save a checkpoint at the next step",
        needs_engine=True,
    ),
    Command(
        "cool_down",
        "C",
        "Cool down",
        show=False,
        help="cool down now (WSD)",
        joins_row=True,
        title="Cool down now",
        summary="Start the WSD schedule's decay at the next step, the run ending with it",
        needs_engine=True,
    ),
    Command(
        "lr_dialog",
        "l",
        "LR",
        help="set the LR (3e-4, x2, /2 ...)",
        title="Set learning rate",
        summary="Set or scale the LR",
        needs_engine=True,
    ),
    Command(
        "lr_up",
        "plus,equals_sign",
        f"LR×{LR_STEP:g}",
        show=False,
        help=f"×{LR_STEP:g}",
        joins_row=True,  # l's row: the help fits 80x24 with ctrl+c's row a line per press
        title=f"LR ×{LR_STEP:g}",
        summary="Scale the learning rate up",
        needs_engine=True,
    ),
    Command(
        "lr_down",
        "minus,underscore",
        f"LR÷{LR_STEP:g}",
        show=False,
        help=f"÷{LR_STEP:g}",
        joins_row=True,
        title=f"LR ÷{LR_STEP:g}",
        summary="Scale the learning rate down",
        needs_engine=True,
    ),
    Command(
        "sample",
        "s",
        "Sample",
        help="generate a sample",
        title="Sample now",
        summary="Generate text at the next step",
        needs_engine=True,
    ),
    Command(
        "evaluate",
        "e",
        "Eval",
        help="evaluate now",
        joins_row=True,
        title="Evaluate now",
        summary="Run an evaluation at the next step",
        needs_engine=True,
    ),
    Command(
        "rollback",
        "r",
        "Roll back",
        show=False,
        help="roll back, LR ÷2 / a finished run: resume",
        title="Roll back",
        summary="Back to the last checkpoint with half the LR, after a NaN or a spike",
        needs_engine=True,
    ),
    Command(
        "resume_run",
        "r",
        "Resume",
        title="Resume this run",
        summary="Train the finished run on screen on from its last checkpoint",
    ),
    Command(
        "new_from_config",
        "n",
        "New run",
        show=False,
        help="new run from its config",
        title="New run from this config",
        summary="Start a new run (step 0) with the config of the run on screen",
    ),
    Command(
        "fork_run",
        "f",
        "Fork",
        show=False,
        help="fork from a checkpoint",
        joins_row=True,
        title="Fork this run",
        summary="A new run from one of its checkpoints, with changed settings",
    ),
    Command(
        "runs",
        "h",
        "Runs",
        show=False,  # the footer at 80 columns has no room left (help, palette, a finished run's note)
        help="runs: open, compare, resume",
        title="Runs",
        summary="Every run: open one, overlay runs on the loss, resume, fork",
    ),
    Command(
        "clear_overlays",
        "O",
        "",
        show=False,
        help="stop comparing",
        joins_row=True,
        title="Stop comparing",
        summary="Remove the other runs' curves from the loss panel",
    ),
    Command(
        "presets",
        "p",
        "Preset",
        help="switch preset (saves a checkpoint first)",
        title="Switch preset",
        summary="Checkpoint this run and start another",
    ),
    _loss_command(
        "toggle_x",
        help="loss x: steps/tokens/time",
        title="Loss x axis: steps / tokens / time",
        summary="Cycle the loss x axis: steps, tokens, training time",
    ),
    _loss_command(
        "toggle_log",
        help="log y",
        joins_row=True,
        title="Loss y axis: linear / log",
        summary="Toggle log-y on the loss",
    ),
    _loss_command(
        "cycle_smoothing",
        # its own row, in the words of the panel's title (ema:heavy): joined to t / g it wrapped
        help="loss EMA: light 0.9 / heavy 0.99 / off",
        title="Loss smoothing: light / heavy / off",
        summary="Cycle the loss curve's EMA",
    ),
    _loss_command(
        "cycle_x_window",
        help="loss x: all or last 1k-100k steps",
        title="Loss x range: whole run / last N steps",
        summary="Zoom the loss to the last steps",
    ),
    _loss_command(
        "toggle_y_all",
        help="y: all steps",
        joins_row=True,
        title="Loss y range: skip / include the first steps",
        summary="Let the y axis take the first steps' losses",
    ),
    *(_zoom_panel(i, pid) for i, pid in enumerate(PANEL_IDS, start=1)),
    Command(
        "zoom",
        "z",
        "Zoom",
        show=False,
        help_keys="z / esc",  # esc is Textual's own un-maximize
        help="zoom the focused panel / back",
        title="Zoom panel",
        summary="Zoom the focused panel, again to restore",
    ),
    Command(
        "app.focus_next", "tab", textual_binds=True, help="next panel", main_only=False
    ),
    Command(
        "command_palette",
        "ctrl+p",
        textual_binds=True,
        help="command palette (every action)",
        joins_row=True,
        main_only=False,
    ),
    Command(
        "journal",
        "j",
        "Journal",
        show=False,
        help="journal of interventions",
        title="Journal",
        summary="Every intervention of the run: when, who, what",
    ),
    Command(
        "live_settings",
        "S",
        "Settings",
        show=False,  # the footer at 80 columns has no room left
        help="live settings",
        joins_row=True,
        title="Live settings",
        summary="Every setting the run can change while it trains: its value, a field to change it",
    ),
    Command(
        "help",
        "question_mark",
        "Help",
        help="this help",
        joins_row=True,
        title="Help",
        summary="Every key",
    ),
    Command(
        "quit",
        "q",
        "Quit",
        help="quit: asks, then saves a checkpoint and exits",
        title="Quit",
        summary="Checkpoint, stop and quit",
    ),
    Command(
        "request_quit",
        "ctrl+c,ctrl+q",
        "Quit",
        show=False,
        priority=True,
        help_keys="ctrl+c ctrl+q",
        # as action_request_quit does: the second press answers the dialog with what loses
        # nothing, a third (while it waits to save) leaves without waiting; one line each
        help=(
            "quit from any screen, dialogs too: it asks\n"
            "again: yes, save a checkpoint and quit\n"
            "  (attached to a run: detach, the run goes on)\n"
            "a third time: quit at once, without the checkpoint"
        ),
        palette_as="quit",
        main_only=False,
    ),
)


def key_bindings() -> list[Binding]:
    """The app's BINDINGS, in table order (the footer shows the shown ones in this order)."""
    bindings = []
    for cmd in COMMANDS:
        if cmd.textual_binds:
            continue
        for action, footer in cmd.bound_as or ((cmd.action, cmd.footer),):
            bindings.append(Binding(cmd.keys, action, footer, show=cmd.show, priority=cmd.priority))
    return bindings


def help_rows(offered: Callable[[str], bool | None] | None = None) -> list[tuple[str, str]]:
    """(keys, description) for each line of the help screen; with `offered` (the app's: see
    CommandActions.offered), only the commands that do something now."""
    rows: list[tuple[str, str]] = []
    joinable = False  # the row above is one a joining command may join
    for cmd in COMMANDS:
        if not cmd.help:
            continue
        actions = [name for name, _ in cmd.bound_as] or [cmd.name]
        if offered is not None and not any(offered(name) for name in actions):
            joinable = joinable and not cmd.joins_row
            continue
        keys = cmd.help_keys or cmd.key_symbol
        if cmd.joins_row and joinable:
            above_keys, above_help = rows.pop()
            keys, description = f"{above_keys} / {keys}", f"{above_help} / {cmd.help}"
        else:
            description = cmd.help
        rows.append((keys, description))
        joinable = True
    return rows


def palette_entries() -> list[tuple[str, str, str]]:
    """(title, description, action) for each of the command palette's entries."""
    return [
        (cmd.title, f"{cmd.summary} ({cmd.key_symbol})", cmd.action)
        for cmd in COMMANDS
        if cmd.title
    ]


# Actions that talk to a running engine (disabled while a dialog is open or nothing runs).
RUN_ACTIONS = frozenset(
    name
    for cmd in COMMANDS
    if cmd.needs_engine
    for name in (cmd.name, *(action for action, _ in cmd.bound_as))
)
# Actions only meaningful on the main screen.
MAIN_ACTIONS = RUN_ACTIONS | {cmd.name for cmd in COMMANDS if cmd.main_only}
