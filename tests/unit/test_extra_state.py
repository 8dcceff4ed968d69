"""hvdlite.algorithms.extra_state: a wrapper's own state rides in the wrapped optimizer's
state dict under its key, and loads back once the wrapper is set up."""

from hvdlite.algorithms.extra_state import ExtraState


class Plain:
    """An optimizer stand-in whose state_dict is a dict."""

    def __init__(self):
        self.loaded = None

    def state_dict(self):
        return {"state": {0: 1}, "param_groups": []}

    def load_state_dict(self, sd):
        self.loaded = sd


class Counting(ExtraState, Plain):
    EXTRA_KEY, SET_UP = "counting", "_steps"

    def _extra_state(self):
        return {"steps": self._steps}

    def _load_extra_state(self, saved):
        self._steps = saved["steps"]


def test_extra_state_round_trips_beside_the_optimizers():
    opt = Counting()
    opt._steps = 7
    sd = opt.state_dict()
    assert sd == {"state": {0: 1}, "param_groups": [], "counting": {"steps": 7}}
    other = Counting()
    other._steps = 0
    other.load_state_dict(sd)
    assert other._steps == 7
    assert other.loaded == {"state": {0: 1}, "param_groups": []}    # the key taken out
    assert "counting" in sd                                          # the caller's dict kept


def test_a_plain_state_dict_loads_and_a_wrapper_not_set_up_ignores_its_state():
    opt = Counting()
    opt._steps = 3
    opt.load_state_dict({"state": {}, "param_groups": []})
    assert opt._steps == 3 and opt.loaded == {"state": {}, "param_groups": []}
    fresh = Counting()          # before its setup: the optimizer's part only
    fresh.load_state_dict({"state": {}, "param_groups": [], "counting": {"steps": 9}})
    assert "_steps" not in fresh.__dict__ and fresh.loaded == {"state": {}, "param_groups": []}
