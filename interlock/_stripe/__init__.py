"""Stripe: the payments protocol the effects read and send through, and its SDK adapter."""
