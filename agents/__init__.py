"""The Faust side of Lockstep: the app, the topic catalogue and thin agents over :mod:`streams`."""
