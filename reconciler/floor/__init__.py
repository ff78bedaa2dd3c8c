"""The ground floor: identities, errors, phases and reasons, quantities and durations,
problems, and the result and action enums. It imports nothing else of nodus_gitops, and
every other layer may import it."""
