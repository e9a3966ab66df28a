"""The package's scripts are the repository's lua/, byte for byte: a build embeds them,
nobody copies them by hand."""
import jobqueue
from support import REPO


def test_the_package_scripts_are_the_repository_lua_files():
    repo = {p.stem: p.read_bytes() for p in sorted((REPO / "lua").glob("*.lua"))}
    package = jobqueue.load_sources()
    assert sorted(package) == sorted(repo), f"scripts differ: package {sorted(package)}, lua/ {sorted(repo)}"
    differ = [name for name in repo if package[name] != repo[name]]
    assert not differ, f"the package's copies of {differ} differ from lua/: reinstall the package (pip install clients/python)"


def test_each_script_is_called_by_the_sha_of_its_source():
    import hashlib

    s = jobqueue.Scripts()
    for name, source in s.sources.items():
        assert s.shas[name] == hashlib.sha1(source).hexdigest()
