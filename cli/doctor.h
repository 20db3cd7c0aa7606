/*
 * doctor.h - sandq doctor (doctor.c).
 */
#ifndef SANDQ_CLIENT_DOCTOR_H
#define SANDQ_CLIENT_DOCTOR_H

/* Runs "sandq doctor" with the arguments after the verb; returns the exit status. */
int doctor_main(int argc, char **argv);

#endif
