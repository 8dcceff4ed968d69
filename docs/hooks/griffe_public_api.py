"""Griffe extension for the API reference: a package without ``__all__`` exports what
``from package import *`` gives, every name without a leading underscore, imported ones
included (hvdlite.tensorflow, hvdlite.keras and hvdlite itself gather their API by importing
it from the modules that define it; griffe would otherwise treat imported names as private).
Only names that come from hvdlite count; submodules are documented on their own."""
import griffe


class PublicApi(griffe.Extension):
    def on_package(self, *, pkg, **kwargs):
        self._mark(pkg)

    def _mark(self, module):
        for member in module.members.values():
            if member.is_alias:
                if (not module.exports and not member.name.startswith("_")
                        and member.target_path.startswith("hvdlite.")
                        and not self._is_module(member)):
                    member.public = True
            elif member.is_module:
                self._mark(member)

    @staticmethod
    def _is_module(alias):
        try:
            return alias.final_target.is_module
        except griffe.AliasResolutionError:
            return False
