"""interlock-demo: one real refund case, a SIGKILLed worker, and what ends up in Stripe."""
