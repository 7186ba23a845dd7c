"""What operators read across the contexts: doctor, console, the events stream, the fleet file."""
