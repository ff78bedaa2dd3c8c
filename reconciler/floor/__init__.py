"""The ground floor: identities, errors, phases and reasons, quantities and durations,
GPU requests and their memory floor, problems, and the result and action enums. It
imports nothing else of nodus_gitops, and every other layer may import it."""
