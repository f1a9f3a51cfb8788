"""compactsim.mock_servers: the deterministic model server and the reward server (FastAPI apps)."""

if __name__ != "compactsim.mock_servers":  # one module object per file: never a second, top-level copy
    raise ImportError("import compactsim.mock_servers, not mock_servers: compactsim installs one top-level package, `compactsim`")
