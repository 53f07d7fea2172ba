"""Where huvm-top's figures come from, behind one adapter (base.py): live (huvm library), sim, bcc, fake,
and replay (huvm_top.record)."""
