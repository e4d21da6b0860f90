"""Engines behind nexrl's stable interfaces (DeepSpeed training, inference servers).

``nexrl`` never imports this package: ``backends.register`` fills nexrl's
registries (imported as a built-in plugin by ``nexrl.core.plugins.registry``), and a
recipe's choice imports only the engine it names.
"""
