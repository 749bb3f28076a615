"""What both sides of a call share: errors, call ids, class metadata, outcomes, the spawn ticket, loops."""
