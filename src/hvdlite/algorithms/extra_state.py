"""An optimizer wrapper's own state carried in the wrapped optimizer's ``state_dict()``
(torch's checkpoint protocol: a dict in, the same dict out), under one key of its own, so
that one checkpoint holds both and a plain optimizer's state dict still loads."""


class ExtraState:
    """Mixed in before an optimizer class whose ``state_dict()`` is a dict.

    ``state_dict()`` adds :meth:`_extra_state` under ``EXTRA_KEY``; ``load_state_dict``
    takes it out, loads the rest into the optimizer, then hands it to
    :meth:`_load_extra_state` once the wrapper is set up (its attribute ``SET_UP`` exists).
    A state dict without the key loads as the plain optimizer's.
    """

    EXTRA_KEY = None    # the key in the state dict
    SET_UP = None       # an instance attribute the wrapper's setup makes

    def _extra_state(self) -> dict:
        raise NotImplementedError

    def _load_extra_state(self, saved: dict) -> None:
        raise NotImplementedError

    def state_dict(self):
        sd = super().state_dict()
        sd[self.EXTRA_KEY] = self._extra_state()
        return sd

    def load_state_dict(self, state_dict):
        state_dict = dict(state_dict)
        saved = state_dict.pop(self.EXTRA_KEY, None)
        super().load_state_dict(state_dict)
        if saved is not None and self.SET_UP in self.__dict__:
            self._load_extra_state(saved)
