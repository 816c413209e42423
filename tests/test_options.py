"""Each search option is defined once (autotune.study.SEARCH_OPTIONS): its flag, the
flag's destination, autotune.search()'s keyword and the SearchOptions field carry
one name and one default, and one check refuses a bad value however it was given."""
from __future__ import annotations

import dataclasses
import inspect

import pytest

import autotune
from autotune.cli._flags import build_parser
from autotune.errors import ConfigError
from autotune.study import SEARCH_OPTIONS, SearchOptions

# SearchOptions' other fields: records built from several flags, not options
RECORDS = {"dataset", "space", "storage", "study_name", "device", "studies_dir", "measure",
           "limits", "guard"}


def _search_actions():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    return {a.dest: a for a in sub.choices["search"]._actions}


def test_every_search_option_is_one_name_from_one_definition():
    actions = _search_actions()
    keywords = inspect.signature(autotune.search).parameters
    fields = {f.name: f for f in dataclasses.fields(SearchOptions)}
    assert len(SEARCH_OPTIONS) >= 15
    for option in SEARCH_OPTIONS:
        action = actions[option.name]  # the flag's destination is the option's name
        flag = option.flag if action.const is None else "--no-" + option.flag[2:]
        assert action.option_strings[0] == flag, option.name
        assert action.default == option.default, option.name
        assert option.help in action.help.replace("%%", "%"), option.name
        assert keywords[option.name].default == option.default, option.name
        assert fields[option.name].default == option.default, option.name
    assert set(fields) == RECORDS | {o.name for o in SEARCH_OPTIONS}, \
        "a SearchOptions field that is neither an option nor a record"


@pytest.mark.parametrize("option", [o for o in SEARCH_OPTIONS if o.check.choices is None
                                    and o.default is not True])
def test_a_flag_and_a_keyword_are_refused_by_the_same_check(option, tmp_path, capsys):
    """The same bad value, as a flag and as a keyword: both refused, each saying what
    the option takes, before anything is prepared."""
    bad = "-1" if option.name != "seed" else "x"
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["search", option.flag, bad])
    assert exit_.value.code == 2
    assert option.check.expected in capsys.readouterr().err
    with pytest.raises(ConfigError, match=rf"^{option.flag} \({option.name}=\) "):
        autotune.prepare_search(**{option.name: bad, "root": str(tmp_path / "d"),
                                   "studies_dir": tmp_path / "s"})
    assert not (tmp_path / "d").exists()


def test_old_names_still_work_and_say_so(tmp_path, caplog):
    args = build_parser().parse_args(["search", "--sampler", "tpe"])
    assert args.optuna_sampler == "tpe"
    assert "--sampler is deprecated: use --optuna-sampler" in caplog.text
    with pytest.warns(FutureWarning, match=r"search\(grace_s=\) is deprecated: pass "
                                            r"grace_period="):
        with pytest.raises(ConfigError, match="--grace-period must be longer"):
            autotune.prepare_search(grace_s=5, heartbeat=10, root=str(tmp_path / "d"),
                                    studies_dir=tmp_path / "s")
