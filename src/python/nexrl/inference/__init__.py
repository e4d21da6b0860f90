"""The inference wing: the service's side, run by the driver.

``supervisor`` starts, health-checks and restarts the service; ``reload`` hands
it new weights; ``checks`` validates the recipe's ``service`` section; ``lora``
names the adapter model rollouts request. The client every caller shares is
``nexrl.core.chat``. The wing never imports ``backends`` at module import time:
engines are found through the ``inference`` registries.
"""
