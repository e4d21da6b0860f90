"""The driver wing: the ``nexrl train`` process.

The command line, recipe loading, the controller's step loop, the data loader,
metrics, the dashboard, model preparation and the cluster builders. It uses
each other wing's face (its spec, handle and task functions).
"""
