"""Start-up hook of hvdlite's Horovod names (Note [horovod names] in hvdlite/horovod_names).

hvdlite_horovod_names.pth imports it at start-up when HVDLITE_HOROVOD_NAMES is set. It
imports nothing of hvdlite: site is still reading .pth files then, so sys.path is not
complete (a virtualenv's system site-packages, where numpy may be, come later). At the first
``import horovod...`` it hands over to hvdlite.horovod_names, which reads the setting.
"""
import sys


class FirstHorovodImport:
    """First on sys.meta_path until the first ``horovod`` import, then gone."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "horovod" and not fullname.startswith("horovod."):
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        from hvdlite import horovod_names
        horovod_names.install_if_asked()
        if not horovod_names.installed():
            return None   # not asked after all (HVDLITE_HOROVOD_NAMES=0): the import goes on
        return horovod_names.FINDER.find_spec(fullname, path, target)


sys.meta_path.insert(0, FirstHorovodImport())
