"""The operator runtime: Kopf wiring, watches, leader election, PodGroup status, events, probes.

Entry points:

- ``lockstep run`` -> :func:`lockstep.controller.main.run_command`.
- In-process (tests, ``lockstep demo``, benchmarks)::

      from lockstep.controller.runtime import OperatorThread
      from lockstep.kube.client import ConnectionInfo
      thread = OperatorThread(settings, connection=ConnectionInfo(server=url, insecure=True)).start()
      ...  # thread.operator.probe(), thread.operator.metrics_port, thread.operator.health_url
      thread.stop()  # graceful, as on SIGTERM; thread.kill() is a crash

  Without ``connection`` the credentials come from ``settings.kubeconfig`` (or in-cluster).

What a group's last attempt found is in its PodGroup's status (``phase``, the ``PodGroupScheduled``
condition, ``unschedulableReasons`` with the rejecting plugins and a few nodes per cause,
``lastAttemptTime``/``nextRetryTime``) and in Events on the PodGroup (or on a pod without a group).
"""
