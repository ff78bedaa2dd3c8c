"""Compute backends behind one interface (`providers.base.Provider`)."""
