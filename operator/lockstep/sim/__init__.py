"""The embedded emulator of kube-apiserver and kube-controller-manager (``lockstep sim``)."""

# The other schedulers' CRDs ``lockstep sim --install-crds`` installs, by name; their schemas are
# ``lockstep.sim.registry.OPTIONAL_CRDS``. Named here so that the CLI's parser, which ``lockstep run``
# builds too, does not import the registry (0.1-0.3 s of start-up, with the CEL interpreter).
OPTIONAL_CRD_NAMES = ("coscheduling", "volcano")
