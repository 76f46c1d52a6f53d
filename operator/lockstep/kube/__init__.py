"""The only code that talks to the Kubernetes API: one aiohttp session with Kopf's credentials
(``client``), strict and loose patches and bindings (``patching``), the raw list+watch loop
(``watch``), Events (``events``), Lease leader election (``lease``) and the scheduler's and DRA's
ports (``ports``)."""
