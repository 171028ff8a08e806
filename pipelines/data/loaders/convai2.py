"""ConvAI2 / PersonaChat in ParlAI's text format (MDR, seed 001, evaluates on it).

Published shape (FORMATS.md): numbered lines, the number restarting at 1 for each
dialogue. ``N your persona: <sentence>`` (and ``N partner's persona: <sentence>`` in
the ``both`` / ``other`` variants) give the personas, then ``N <partner
utterance>\\t<response>``; files with candidates add more tab fields (an empty reward
field, then ``|``-separated candidates), which are ignored here.

Mapping: one Episode per dialogue (id ``<file stem>:<k>``, split from the file name,
default ``train``) with two speakers, ``self`` (the persona holder, who gives the
responses: the main speaker) and ``partner``, each with their persona sentences, and
one session ``session_1`` whose turns alternate partner utterance (Q) and response (R):
turn ids ``<line number>q`` / ``<line number>r``.

Drop reasons: ``silence_placeholder`` (ParlAI's ``__SILENCE__`` partner turn),
``missing_response`` (a line without a tab: the utterance is kept, the response is
missing), ``line_number_gap`` (numbers jump: a line is missing from the dialogue),
``empty_dialogue`` (persona lines with no utterance: no episode).
A line not starting with a number raises DataError naming the file and the line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from pipelines.data.loaders.registry import register
from pipelines.data.loaders.base import LoadResult, Where, build, files_in, read_text, split_from_name
from pipelines.data.schema import Episode, Session, Speaker, Turn

SELF, PARTNER = "self", "partner"
SILENCE = "__SILENCE__"
_LINE = re.compile(r"^(\d+) (.*)$", re.DOTALL)
_PERSONA = {"your persona:": SELF, "partner's persona:": PARTNER}


@dataclass
class _Dialogue:
    start_line: int
    personas: dict[str, list[str]] = field(default_factory=lambda: {SELF: [], PARTNER: []})
    turns: list[Turn] = field(default_factory=list)


@register("convai2")
def load(path: str | Path) -> LoadResult:
    result = LoadResult()
    for file in files_in(path, "*.txt"):
        _load_file(file, result)
    return result


def _load_file(file: Path, result: LoadResult) -> None:
    split = split_from_name(file, "train")
    lines = read_text(file).split("\n")
    dialogues: list[_Dialogue] = []
    last = 0
    for lineno, line in enumerate(lines, start=1):
        line = line.rstrip("\r")
        if not line.strip():
            continue
        where = Where(str(file), f"line {lineno}")
        m = _LINE.match(line)
        if m is None:
            raise where.error("expected '<number> <text>' (ParlAI text format)")
        number, body = int(m.group(1)), m.group(2)
        if number == 1 or not dialogues:
            dialogues.append(_Dialogue(start_line=lineno))
            if number != 1:
                result.drop("line_number_gap", where.example(f"dialogue starts at number {number}"))
        elif number != last + 1:
            result.drop("line_number_gap", where.example(f"number {number} after {last}"))
        last = number
        dialogue = dialogues[-1]
        persona = next((who for prefix, who in _PERSONA.items() if body.startswith(prefix)), None)
        if persona is not None:
            sentence = body.split(":", 1)[1].strip()
            if sentence:
                dialogue.personas[persona].append(sentence)
            continue
        fields = body.split("\t")
        utterance = fields[0].strip()
        if utterance == SILENCE:
            result.drop("silence_placeholder", where.example("partner turn is __SILENCE__"))
        else:
            dialogue.turns.append(build(Turn, where, id=f"{lineno}q", speaker=PARTNER, text=utterance))
        if len(fields) < 2:
            result.drop("missing_response", where.example("no tab-separated response"))
            continue
        dialogue.turns.append(build(Turn, where, id=f"{lineno}r", speaker=SELF, text=fields[1].strip()))

    for k, dialogue in enumerate(dialogues):
        where = Where(str(file), f"line {dialogue.start_line}")
        if not dialogue.turns:
            result.drop("empty_dialogue", where.example("persona lines but no utterance"))
            continue
        session = build(Session, where, id="session_1", index=0, partner=PARTNER, turns=dialogue.turns)
        result.episodes.append(build(
            Episode, where, id=f"{file.stem}:{k}", source="convai2", main_speaker=SELF,
            speakers=[Speaker(name=SELF, persona=dialogue.personas[SELF]),
                      Speaker(name=PARTNER, persona=dialogue.personas[PARTNER])],
            sessions=[session], split=split))
